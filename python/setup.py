"""The wheel holds a native library (loaded through ctypes, so it does not depend on the Python
ABI): installed as platform files and tagged py3-none-<platform> instead of pure Python."""
from setuptools import setup
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel


class NativeDistribution(Distribution):
    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return "py3", "none", super().get_tag()[2]


setup(distclass=NativeDistribution, cmdclass={"bdist_wheel": PlatformWheel})
