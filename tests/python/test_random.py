"""Random operators on libmxrt: MXRandomSeed makes them reproducible and each distribution has
its moments (random_checks.py; the streams need not equal MXNet's)."""
from conftest import libmxrt, run_script


def test_random_operators_are_seeded_and_have_their_distributions():
    proc = run_script("random_checks.py", str(libmxrt()))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "all random checks passed" in proc.stdout
