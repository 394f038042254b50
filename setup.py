"""Maps the repository's top-level source folders into the `ray_accel` namespace."""

from setuptools import find_packages, setup

SOURCE_ROOTS = ("exporter", "dashboard_module")

setup(
    packages=[
        f"ray_accel.{package}"
        for package in find_packages(include=[f"{root}*" for root in SOURCE_ROOTS])
    ]
)
