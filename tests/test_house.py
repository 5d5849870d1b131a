"""The house: no unused code (vulture, with the names only users' plugins and Python's
protocols use listed in tools/vulture_allowlist.py)."""
import subprocess
import sys

import pytest

from conftest import REPO

SOURCES = ["npuopt", "npuopt_run", "npuopt_export", "plugins", "tools", "bench", "model_tests", "tests"]
# registered through the plugin API's decorators, called by pytest/click, or a property
USED_BY_DECORATOR = ["@op_register", "@quant_register", "@register_plugin", "@approx_register", "@patches_register",
                     "@register_optype", "@global_calibration", "@*.command", "@click.*", "@property", "@*.setter", "@pytest.*",
                     "@*.register_fake"]  # torch.library: a custom op's shape function


def test_no_unused_code():
    pytest.importorskip("vulture", reason="vulture (the test extra) is not installed")
    run = subprocess.run([sys.executable, "-m", "vulture", *SOURCES, "--min-confidence", "60",
                          "--ignore-decorators", ",".join(USED_BY_DECORATOR)],
                         cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, "unused code (delete it, or list a plugin-API name in " \
                                "tools/vulture_allowlist.py):\n" + run.stdout
