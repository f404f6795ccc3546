"""`dtlab list`, `dtlab compare` and `dtlab ui` do what the README says."""
import os
import subprocess
import sys
from pathlib import Path

from components.core.registry import KINDS, entries
from pipelines.config import ROOT, experiment_names


def cli(*args, env=None, timeout=120):
    e = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=e, cwd=ROOT)


def test_list_names_every_experiment_and_registered_entry_with_its_file():
    # Execute
    r = cli("list", env={"COLUMNS": "250"})
    # Assert: every experiment, and every entry of every kind with the file that defines it
    assert r.returncode == 0, r.stderr
    for name in experiment_names():
        assert name in r.stdout
    for kind in KINDS:
        for name, e in entries(kind).items():
            assert name in r.stdout
            assert (Path(ROOT) / e.file).is_file(), e.file
            assert e.file in r.stdout, f"{kind} {name}: file {e.file} not shown"


def test_list_kind_shows_only_that_kind_and_rejects_unknown_kinds():
    # Execute
    blocks = cli("list", "block", env={"COLUMNS": "250"})
    bad = cli("list", "nope")
    # Assert
    assert blocks.returncode == 0 and "pre_ln" in blocks.stdout and "experiments" not in blocks.stdout
    assert bad.returncode == 2 and "list KIND='nope'" in bad.stderr and "technique" in bad.stderr


def test_compare_writes_html_with_latest_runs(run_experiment, tracking_uri, runs_dir):
    run_experiment("platform_probe")
    r = cli("compare", "platform_probe", f"runs_dir={runs_dir}", env={"MLFLOW_TRACKING_URI": tracking_uri, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert "values_ordered" in r.stdout
    html_path = r.stdout.strip().splitlines()[-1].split("HTML report: ")[-1]
    html = Path(html_path).read_text()
    assert "platform_probe" in html and "values_ordered" in html and "data:image/png;base64" in html
    r = cli("compare", "no_such_experiment", f"runs_dir={runs_dir}", env={"MLFLOW_TRACKING_URI": tracking_uri})
    assert r.returncode != 0 and "no runs of experiment" in r.stderr + r.stdout


# ---------------------------------------------------------------- a CLI that explains itself
def test_run_help_lists_every_config_group_and_its_options():
    from pipelines.config import CONF_DIR, GROUPS

    # Execute
    r = cli("run", "--help")
    # Assert: each group with every option file under conf/GROUP/, and the root switches
    assert r.returncode == 0, r.stderr
    for group in GROUPS:
        opts = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
        assert opts and f"  {group}=  " + " | ".join(opts) in r.stdout, group
    assert "debug=" in r.stdout and "verbose=" in r.stdout and "-m/--multirun" in r.stdout


def test_every_subcommand_answers_help_without_acting():
    # Execute / Assert: its usage, exit 0, and nothing run (no MLflow started, no store searched)
    for cmd in ("run", "list", "compare", "ui", "serve", "up", "down", "gc", "completion"):
        r = cli(cmd, "--help")
        assert r.returncode == 0 and f"dtlab {cmd}" in r.stdout, (cmd, r.stdout[-300:], r.stderr[-300:])
        assert "no runs of experiment" not in r.stdout + r.stderr and "--backend-store-uri" not in r.stdout, cmd


def test_ui_and_compare_reject_what_is_not_theirs():
    # Execute
    ui = cli("ui", "--bogus")
    cmp = cli("compare", "--bogus")
    # Assert: one line, exit 2 (the old ui handed "--bogus" to MLflow as its port)
    assert ui.returncode == 2 and "ui PORT='--bogus'" in ui.stderr and len(ui.stderr.strip().splitlines()) == 1
    assert cmp.returncode == 2 and "unknown option '--bogus'" in cmp.stderr


def test_list_experiment_shows_variants_claims_prepare_steps_and_axes():
    from pipelines import config
    from pipelines.experiment import build_spec

    for name in ("gatekeeper", "php_fl"):
        spec = build_spec(config.compose([f"experiment={name}"])["experiment"])
        # Execute
        r = cli("list", name, env={"COLUMNS": "400"})
        # Assert
        assert r.returncode == 0, r.stderr
        for v in spec.variants:
            assert v.name in r.stdout and v.technique in r.stdout
        for c in spec.claims:
            assert c.name in r.stdout and c.holds.split(" ")[0] in r.stdout
        assert all(p.step in r.stdout for p in spec.prepare)
        assert ("control (not gated)" in r.stdout) == any(not c.gate for c in spec.claims)
        assert all(a in r.stdout for a in spec.axes) and (f"{name}: axes" in r.stdout) == bool(spec.axes)


def _bash_complete(script: Path, words: list[str]) -> list[str]:
    """What the completion offers for ``words`` (the last one being typed), split as bash splits
    them (COMP_WORDBREAKS holds "=": ``experiment=gat`` is three words)."""
    import shlex

    line = " ".join(words)
    split = []
    for w in words:
        if "=" in w:
            k, v = w.split("=", 1)
            split += [k, "=", v]
        else:
            split.append(w)
    prog = (f"source {shlex.quote(str(script))}; COMP_LINE={shlex.quote(line)}; COMP_POINT=${{#COMP_LINE}}; "
            f"COMP_WORDS=({' '.join(shlex.quote(w) for w in split)}); COMP_CWORD={len(split) - 1}; "
            "_dtlab; printf '%s\\n' \"${COMPREPLY[@]}\"")
    r = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return [w for w in r.stdout.splitlines() if w]


def test_bash_completion_completes_commands_experiments_groups_and_kinds(tmp_path):
    # Prepare
    r = cli("completion", "bash")
    assert r.returncode == 0, r.stderr
    script = tmp_path / "dtlab.bash"
    script.write_text(r.stdout)
    # Execute / Assert
    assert _bash_complete(script, ["dtlab", "co"]) == ["compare", "completion"]
    assert _bash_complete(script, ["dtlab", "run", "experiment=gat"]) == ["gatekeeper"]
    assert _bash_complete(script, ["dtlab", "run", "debug=true", "cluster="]) == ["local", "remote"]
    assert "hparams_search=" in _bash_complete(script, ["dtlab", "run", "h"])
    assert _bash_complete(script, ["dtlab", "list", "tech"]) == ["technique"]
    assert _bash_complete(script, ["dtlab", "list", "php"]) == ["php_fl"]
    assert _bash_complete(script, ["dtlab", "compare", "platform_"]) == ["platform_probe"]
    # the script registers itself for `dtlab`
    r = subprocess.run(["bash", "-c", f"source {script}; complete -p dtlab"], capture_output=True, text=True)
    assert "-F _dtlab" in r.stdout


def test_zsh_completion_completes_experiments(tmp_path):
    import shutil

    zsh = shutil.which("zsh")
    if zsh is None:
        import pytest

        pytest.skip("zsh is not installed (apt-get install zsh); the bash test covers the shared completion")
    # Prepare
    script = tmp_path / "dtlab.zsh"
    script.write_text(cli("completion", "zsh").stdout)

    def complete(line: str) -> list[str]:
        words = line.split(" ")
        prog = (f"source {script}; COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; COMP_WORDS=({line}); "
                f"COMP_CWORD={len(words) - 1}; _dtlab; print -l $COMPREPLY")
        r = subprocess.run([zsh, "-f", "-c", prog], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    # Execute / Assert: zsh keeps "experiment=gat" one word, so the reply carries the key
    assert complete("dtlab run experiment=gat") == ["experiment=gatekeeper"]
    assert complete("dtlab list tech") == ["technique"]
    assert complete("dtlab co") == ["compare", "completion"]


def test_bad_verbose_is_one_line_before_ray():
    # Execute
    r = cli("run", "experiment=platform_probe", "verbose=maybe")
    # Assert
    assert r.returncode == 2 and r.stderr.strip() == "dtlab: error: verbose='maybe': true or false"


def test_list_with_a_broken_experiment_yaml_is_one_line(tmp_path):
    # Prepare: a conf dir outside the repository with one experiment file indented by a tab
    import shutil

    from pipelines.config import CONF_DIR

    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "experiment" / "zz_broken.yaml").write_text("name: zz_broken\nvariants:\n\ta: 1\n")
    # Execute
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "list", "experiment"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "DTLAB_CONF_DIR": str(conf)}, cwd=ROOT)
    # Assert
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "zz_broken.yaml" in r.stderr and "Traceback" not in r.stderr
