"""tests/fuzz/fuzz_python_readers.py's loop, a few thousand rounds: the plugin's environment, its layer
names and the digit reader against their grammars (a long run: tests/fuzz/fuzz_python_readers.py -t 600)."""
import importlib.util
import os

from conftest import REPO_ROOT


def test_the_python_readers_agree_with_their_grammars():
    path = os.path.join(REPO_ROOT, "tests", "fuzz", "fuzz_python_readers.py")
    spec = importlib.util.spec_from_file_location("fuzz_python_readers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tried, findings = module.run(count=3000, seed=7)
    assert tried == 15000 and findings == [], findings
