# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The requirements venv's decisions (module_utils/_pod_venv.py): key, requirement names, what replaces torch."""

from __future__ import annotations

from ansible_collections.trainops.gpu.plugins.module_utils import _pod_venv as pv


def test_the_key_changes_with_the_file_and_with_the_python():
    key = pv.venv_key(b"tinydep==1.0\n", "CPython 3.11.2 x86_64 /usr/bin/python3")
    assert len(key) == pv.KEY_HEX and key == pv.venv_key(b"tinydep==1.0\n", "CPython 3.11.2 x86_64 /usr/bin/python3")
    assert key != pv.venv_key(b"tinydep==1.0\n#\n", "CPython 3.11.2 x86_64 /usr/bin/python3")
    assert key != pv.venv_key(b"tinydep==1.0\n", "CPython 3.12.1 x86_64 /usr/bin/python3")
    assert key != pv.venv_key(b"tinydep==1.0\n", "CPython 3.11.2 x86_64 /usr/bin/python3", ["--no-index"])


def test_files_named_inside_the_file_and_an_old_pip_are_said_plainly():
    assert pv.unsupported_lines("a\n-r base.txt\n--constraint=c.txt\n-e .\n", "req.txt") == [
        "req.txt line 2 names another file (-r base.txt): give one self-contained requirements file",
        "req.txt line 3 names another file (--constraint=c.txt): give one self-contained requirements file",
    ]
    assert pv.pip_version("pip 23.0.1 from /usr/lib/python3/dist-packages/pip (python 3.11)") == (23, 0)
    assert pv.pip_version("pip 22.0.2 from x") < pv.PIP_MIN and pv.pip_version("nonsense") is None


def test_requirement_names_skip_options_comments_and_blank_lines():
    text = "# pinned\n--find-links /wheels\n\nTransformers[torch]>=4.0  # the trainer\n-r other.txt\nmy_pkg.sub==1\n"
    assert pv.requirement_names(text) == [(4, "transformers"), (6, "my-pkg-sub")]


def test_a_torch_line_is_refused_by_name_and_line():
    assert pv.refused_in_file("numpy\nTorch==2.0\n", "req.txt") == [
        "req.txt line 2 asks for torch: the image's own torch is used (the venv sees it), never replaced"
    ]
    assert pv.refused_in_file("torchvision\ntorchmetrics\n", "req.txt") == []


def test_a_dry_run_report_that_installs_torch_names_who_asked():
    report = {
        "install": [
            {"metadata": {"name": "lightning", "version": "2.6.6", "requires_dist": ["torch>=2.1", "PyYAML"]}},
            {"metadata": {"name": "torch", "version": "2.1.0", "requires_dist": []}},
            {"metadata": {"name": "PyYAML", "version": "6.0"}},
        ]
    }
    assert pv.refused_in_report(report) == [
        "installing the requirements would install torch 2.1.0 (required by lightning 2.6.6): the image's own torch "
        "is used, never replaced"
    ]
    assert pv.installed_in_report(report) == ["PyYAML==6.0", "lightning==2.6.6", "torch==2.1.0"]
    assert pv.refused_in_report({"install": [{"metadata": {"name": "PyYAML", "version": "6.0"}}]}) == []
    assert pv.refused_in_report({}) == []


def test_only_a_complete_marker_counts():
    assert pv.read_marker('{"key": "abc", "freeze": ["a==1"]}') == {"key": "abc", "freeze": ["a==1"]}
    for text in ("", "{", "[]", '{"key": 1, "freeze": []}', '{"key": "abc"}'):
        assert pv.read_marker(text) is None, text
