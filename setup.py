"""Packaging: metadata lives in setup.cfg. The built-in plugins folder `plugins/`
is installed as the package `npuopt_plugins`, so a plain `pip install .`
finds them from any working directory."""
from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["npuopt", "npuopt.*", "npuopt_run", "npuopt_run.*", "npuopt_export"]) + ["npuopt_plugins"],
    package_dir={"npuopt_plugins": "plugins"},
)
