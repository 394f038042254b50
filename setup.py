"""Maps the repository's top-level source folders into the `ray_accel` namespace.

Also installs `ray_accel_dashboard.pth` into site-packages (wheels and editable
installs alike): it loads the Accelerators tab into Ray's dashboard only when
RAY_ACCEL_DASHBOARD=1 (see dashboard_module/bootstrap.py).
"""

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

SOURCE_ROOTS = ("exporter", "dashboard_module", "grafana", "demo")
PTH = Path(__file__).parent / "dashboard_module" / "ray_accel_dashboard.pth"


class BuildPyWithPth(build_py):
    """Puts the .pth at the wheel's root, which pip installs into site-packages."""

    def run(self):
        super().run()
        if not self.editable_mode:
            shutil.copy(PTH, Path(self.build_lib) / PTH.name)


commands = {"build_py": BuildPyWithPth}
try:
    from setuptools.command.editable_wheel import editable_wheel

    class EditableWheelWithPth(editable_wheel):
        """The same for `pip install -e .`: the .pth goes beside setuptools' own."""

        def _install_namespaces(self, installation_dir, pth_prefix):
            super()._install_namespaces(installation_dir, pth_prefix)
            shutil.copy(PTH, Path(installation_dir) / PTH.name)

    commands["editable_wheel"] = EditableWheelWithPth
except ImportError:  # setuptools without PEP 660 support
    pass

setup(
    cmdclass=commands,
    packages=[
        f"ray_accel.{package}"
        for package in find_packages(include=[f"{root}*" for root in SOURCE_ROOTS])
    ],
)
