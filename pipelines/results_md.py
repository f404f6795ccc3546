"""RESULTS.md: the board as one generated file, written by `dtlab reproduce` from the store.

Built from the same rows as `dtlab scoreboard` (pipelines.scoreboard.collect): one board run per
experiment (the latest FINISHED run of its full configuration in the flavour asked for). The file
holds a header (code version, dates, machine, total wall time), a summary table (one row per
experiment: the paper's headline, ours ± SE, gated claims by status with ``kind: accounting`` claims
apart, robustness k/n, wall time and peak memory), one section per experiment (every claim: the
paper's figure, the measured figure labelled by name, status, premise; plots as links; spec sheet
and family README) and, at the end, each experiment's recorded inputs, so that
`dtlab reproduce --check` tells from the file alone whether it is current for a checkout.

Nothing in it depends on when it is generated: the same store and the same file being overwritten
give the same bytes. An experiment without a board run in the store is CARRIED from the RESULTS.md
being overwritten (same path, same flavour) when the inputs that file records for it are this
checkout's (the comparison `--check` makes): its row and section are kept as they were, marked
carried, and count in the header and summary; a run in the store always wins, and changed inputs
are never carried (so a fresh clone that re-runs one experiment keeps the rest of the board).
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

from components.core.provenance import ROOT
from pipelines.flavours import flavour_overrides
from pipelines.inputs import upgraded
from pipelines.scoreboard import perturbation_status

BEGIN, END = "<!-- dtlab-inputs:begin -->", "<!-- dtlab-inputs:end -->"
HEADLINE_CHARS = 110
STATUS_COLUMNS = ("holds", "fails", "premise not met", "inconclusive")
KEPT = ("holds", "premise not met", "inconclusive")   # a perturbation keeps a claim unless the claim fails under it
CARRIED = "carried from the previous RESULTS.md: this run is not in the current store; its inputs are unchanged"
ROW_CARRIED = "(carried)"
SECTION_END = "<details><summary>Recorded inputs"


def _md(text: Any) -> str:
    """Text for a markdown table cell: pipes escaped, newlines as <br>."""
    return str(text).replace("|", "\\|").replace("\n", "<br>")


def _short(text: str, n: int = HEADLINE_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "", name.lower().replace(" ", "-"))


def run_wall(run) -> float | None:
    """A board run's wall seconds: what reproduce measured around it, else the run's own total."""
    m = run.data.metrics
    for k in ("reproduce.wall_s", "platform.total_s"):
        if k in m and math.isfinite(m[k]):
            return float(m[k])
    if run.info.end_time and run.info.start_time:
        return (run.info.end_time - run.info.start_time) / 1000
    return None


def prepare_pass(run) -> dict[str, Any] | None:
    """What reproduce's prepare pass before the run built and how long it took (the run's wall is then
    measured with a warm cache); None for a run made without one (its wall holds whatever it built).
    A pass the board shared (reproduce's one pass for several experiments) also has ``shared``: the
    experiments it built for; its seconds are the whole pass's, the same on each of them."""
    secs = run.data.metrics.get("reproduce.prepare_s")
    if secs is None:
        return None
    tags = run.data.tags
    built = tags.get("reproduce.prepare_built", "")
    out = {"seconds": float(secs), "built": [b for b in built.split(", ") if b]}
    if tags.get("reproduce.prepare_pass"):
        out["shared"] = [e for e in tags.get("reproduce.prepare_shared", "").split(", ") if e]
        if run.data.metrics.get("reproduce.prepare_compute_s") is not None:
            out["compute_s"] = float(run.data.metrics["reproduce.prepare_compute_s"])
    return out


def prepare_text(p: dict[str, Any] | None) -> str:
    """The run line's note on its prepare: "" without a pass (older runs)."""
    if p is None:
        return ""
    if not p["built"]:
        return " (warm cache)"
    if p.get("shared"):
        own = f"; its own steps {duration(p['compute_s'])} of compute" if p.get("compute_s") is not None else ""
        return (f" (warm cache; its cold prepare, one pass before the runs shared by {len(p['shared'])} experiments: "
                f"{duration(p['seconds'])}{own})")
    return f" (warm cache; its cold prepare, a pass before the run: {duration(p['seconds'])})"


def _parse_cold_prepare(section: list[str]) -> dict[str, Any] | None:
    """The cold prepare a carried section's run line names ({seconds, and for a shared pass the number of
    experiments that shared it}), None if it names none."""
    line = _run_line(section) or ""
    m = re.search(r"its cold prepare, a pass before the run: ([0-9hms]+)\)", line)
    if m:
        return {"seconds": _parse_duration(m.group(1))}
    m = re.search(r"its cold prepare, one pass before the runs shared by (\d+) experiments: ([0-9hms]+)"
                  r"(?:; its own steps [0-9hms]+ of compute)?\)", line)
    return {"seconds": _parse_duration(m.group(2)), "shared_n": int(m.group(1))} if m else None


def shared_pass_key(p: dict[str, Any]) -> tuple[int, int] | None:
    """Which board pass a prepare (:func:`prepare_pass`, or a carried section's) was, None for an experiment's own
    pass: (its rounded seconds, how many experiments shared it), all a carried run line keeps of it."""
    if not (p.get("shared") or p.get("shared_n")):
        return None
    return round(p["seconds"]), len(p["shared"]) if p.get("shared") else p["shared_n"]


def cold_passes(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The cold prepare passes behind ``entries`` (the model's experiments): {"own": {experiment:
    seconds}, "shared": [{seconds, experiments}]}, a shared pass counted once however many it built for."""
    own, shared = {}, {}
    for e in entries:
        p = e.get("prepare") or {}
        if not p.get("built") or p.get("seconds") is None:
            continue
        key = shared_pass_key(p)
        if key is not None:
            shared.setdefault(key, {"seconds": p["seconds"], "experiments": []})["experiments"].append(e["name"])
        else:
            own[e["name"]] = p["seconds"]
    return {"own": own, "shared": list(shared.values())}


def duration(s: float | None) -> str:
    if s is None:
        return "–"
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def machine_text(speed: float | None = None) -> str:
    """This machine: CPU model and the vector ISA torch's CPU kernels use, cores, memory, GPU (what
    reproduce records on every run it makes). The ISA matters: the same code and seed give the same
    figures bit for bit on one machine, and different last bits, so different trajectories, on a CPU
    whose kernels block their sums differently (seen here: duo's loss ratios moved in the third digit
    between the board's earlier host and this one, while the old and the new code give the same bits
    on this one). ``speed``: :func:`machine_speed`, appended when measured (hosts that all read
    "AMD EPYC (AVX512) · 2 cores" here have run the same code 1.3-2.7x apart)."""
    import psutil

    gpu, isa = "no GPU", ""
    try:
        import torch

        isa = torch.backends.cpu.get_cpu_capability()
        if torch.cuda.is_available():
            gpu = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    except Exception:  # noqa: BLE001 - no torch or no driver: no GPU to name
        pass
    cpu = _cpu_model() + (f" ({isa})" if isa else "")
    text = f"{cpu} · {os.cpu_count()} cores · {psutil.virtual_memory().total / 2 ** 30:.0f} GiB · {gpu}"
    return text + (f" · {speed:.0f} {SPEED_UNIT}" if speed else "")


SPEED_UNIT = "small-GPT steps/s on one core"


def machine_speed(seconds: float = 1.5, seed: int = 0) -> float:
    """This machine's speed at the board's typical work: training steps per CPU-second (thread
    time, one torch thread) of the shared small GPT (2 layers, d 64, context 64, batch 16: duo's
    model and batch), forward, backward and AdamW. RESULTS.md names it beside the machine, so wall
    times from two hosts that print the same CPU model can be told apart from a change in the code.
    Timed with components.core.timing (thread clock) for about ``seconds`` after 3 warm-up steps."""
    import torch

    from components.core.timing import timed
    from components.models.gpt import GPT, SIZES, GPTConfig

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(seed)
        model = GPT(GPTConfig(vocab_size=96, **SIZES["small"]))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randint(0, 96, (16, 64), generator=gen)
        y = torch.randint(0, 96, (16, 64), generator=gen)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            model(x, y)[1].backward()
            opt.step()

        for _ in range(3):
            step()
        steps, total = 0, 0.0
        while steps < 5 or (total < seconds and steps < 10_000):
            with timed("thread") as t:
                step()
            steps, total = steps + 1, total + t.s
        return steps / total
    finally:
        torch.set_num_threads(threads)


def _cpu_model() -> str:
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def _links(exp: str, family: str, base: Path) -> list[tuple[str, str]]:
    """(label, relative link) for the experiment's config, spec sheet and family README, where they exist."""
    out = []
    targets = [("config", ROOT / "conf" / "experiment" / f"{exp}.yaml"),
               ("spec sheet", ROOT.parent / "shared" / "techniques" / f"{exp}.md"),
               ("family README", ROOT / "components" / family / "README.md")]
    for label, path in targets:
        if path.exists():
            out.append((label, os.path.relpath(path, base)))
    return out


def build(client, flavour: str = "full", experiments: list[str] | None = None, current=None,
          plots_dir: Path | None = None, base: Path = ROOT, previous: str | None = None) -> dict[str, Any]:
    """The file's content as data: header, one entry per experiment, recorded inputs. With
    ``plots_dir``, each board run's plots are copied there (the file links them relative to ``base``).
    ``previous``: the text of the RESULTS.md being overwritten, whose current experiments without a
    board run in the store are carried (:func:`_carry`)."""
    from pipelines import scoreboard as sb

    rows, latest = sb.collect(client, experiments=experiments, flavour=flavour, current=current)
    now_of = current or (lambda e: sb.current_inputs(e, flavour))
    art = sb._Artifacts(client)
    configs = sb._experiment_configs()
    out: dict[str, Any] = {"flavour": flavour, "experiments": [], "inputs": {}}
    for exp in dict.fromkeys(r["experiment"] for r in rows):
        mine = [r for r in rows if r["experiment"] == exp]
        run = latest.get(exp)
        gated = [r for r in mine if r["gate"] and r["status"] != "not run"]
        emp = [r for r in gated if r["kind"] != "accounting"]
        acc = [r for r in gated if r["kind"] == "accounting"]
        statuses = list(dict.fromkeys([*STATUS_COLUMNS, *(r["status"] for r in emp)]))
        gated_rows = [r for r in mine if r["gate"] and r["kind"] != "accounting"]
        # the paper's claim, not the platform's own check (e.g. in-process ranks equal Ray Train) that opens a list
        head = next((r for r in gated_rows if not str(r["paper"]).startswith("(platform)")),
                    gated_rows[0] if gated_rows else None)
        entry: dict[str, Any] = {
            "name": exp, "family": mine[0]["family"], "run_id": run.info.run_id if run else "",
            "run_name": run.info.run_name if run else "", "code_version": mine[0]["code_version"],
            "date": mine[0]["date"], "stale": mine[0]["stale"] if run else None,
            "counts": {s: sum(r["status"] == s for r in emp) for s in statuses},
            "accounting": {"held": sum(r["status"] == "holds" for r in acc), "judged": len(acc)},
            "headline": {"claim": head["claim"], "paper": head["paper"],
                         "ours": (head["measured_labelled"] or head["measured"] or "").replace("\n", "; "),
                         "status": head["status"]} if head else None,
            "wall_s": run_wall(run) if run else None,
            "peak_mb": run.data.metrics.get("reproduce.peak_rss_mb") if run else None,
            "prepare": prepare_pass(run) if run else None,
            "machine": run.data.tags.get("dtlab.machine", "") if run else "",
            "claims": mine, "robustness": _robustness(mine), "plots": [],
            "links": _links(exp, str((configs.get(exp) or {}).get("family") or mine[0]["family"]), base),
        }
        if run is not None:
            recorded = art.json(run.info.run_id, "inputs.json")
            if recorded:
                out["inputs"][exp] = {**upgraded(recorded, now_of(exp)), "overrides": [f"experiment={exp}"]
                                      + flavour_overrides(flavour)}
            if plots_dir is not None:
                entry["plots"] = _copy_plots(client, run.info.run_id, plots_dir / exp, base)
        out["experiments"].append(entry)
    if previous:
        _carry(out, previous, now_of)
    ran = [e for e in out["experiments"] if e["run_id"]]
    out["code_versions"] = sorted({e["code_version"] for e in ran})
    out["robustness_code_versions"] = sorted({r["code_version"] for e in ran for r in e["robustness"]["runs"].values()})
    out["dates"] = sorted(e["date"] for e in ran)
    out["machines"] = sorted({e["machine"] for e in ran if e["machine"]} | {m for e in ran for m in e.get("machines", ())})
    out["total_wall_s"] = sum(e["wall_s"] or 0.0 for e in ran)
    out["cold_prepare"] = cold_passes(ran)
    versions = sorted({i.get("version", "") for i in out["inputs"].values()})
    out["dtlab_versions"] = versions
    return out


def _robustness(rows: list[dict]) -> dict[str, Any]:
    """k/n: of the perturbations judged on this checkout's code, those under which no gated claim that
    holds tuned fails. A perturbation whose code has changed since is listed (stale) and not counted."""
    gated = [r for r in rows if r["gate"] and r["kind"] != "accounting" and r["status"] == "holds"]
    labels = sorted({k for r in rows for k in r["off_tuned"]["perturbations"]})
    runs = {k: {**{f: v.get(f, "") for f in ("code_version", "date", "run_failed")}, "stale": bool(v.get("stale"))}
            for r in rows for k, v in r["off_tuned"]["perturbations"].items()}
    counted = [label for label in labels if not runs[label]["stale"]]
    kept = []
    for label in counted:
        judged = [r["off_tuned"]["perturbations"].get(label, {}).get("status", "not run") for r in gated]
        if all(s in KEPT or s == "not run" for s in judged):
            kept.append(label)
    return {"k": len(kept), "n": len(counted), "kept": kept, "labels": labels, "runs": runs}


def _copy_plots(client, run_id: str, folder: Path, base: Path) -> list[tuple[str, str]]:
    from pipelines.artifacts import pngs as _pngs

    out = []
    for name, data in sorted(_pngs(client, run_id)):
        target = folder / Path(name).name
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_bytes() != data:
            target.write_bytes(data)
        out.append((Path(name).stem, os.path.relpath(target, base)))
    return out


# ------------------------------------------------------------------------------------------ carry
def recorded_changes(recorded: dict[str, Any], now) -> list[str]:
    """Why the inputs a RESULTS.md records for an experiment are not ``now`` ([] when they are): the
    comparison `dtlab reproduce --check` makes, and the one that decides what is carried."""
    from pipelines.inputs import Inputs, changed

    return changed(Inputs.from_json(recorded), now)


def _carry(model: dict[str, Any], previous: str, current) -> None:
    """Fill, from the file being overwritten, each experiment of ``model`` with no board run whose
    inputs that file records as ``current(experiment)`` (same flavour only); others stay as they are.
    A record with the legacy config hash is re-keyed (:func:`pipelines.inputs.upgraded`)."""
    old = _old_board(previous, model["flavour"])
    machines = _old_machines(previous) if old else []
    for e in model["experiments"]:
        o = old.get(e["name"])
        now = current(e["name"]) if o is not None else None
        if now is None or recorded_changes(o["inputs"], now):
            continue
        if e["run_id"]:   # re-run on the inputs the file records: its perturbation columns stay
            _keep_perturbations(e, o["section"])
            continue
        store_rows = e["claims"]   # perturbation runs in the store, judged against the carried tuned run
        e.update(_carried_entry(e["name"], o, machines))
        if any(r["off_tuned"]["perturbations"] for r in store_rows):
            _merge_robustness(e, store_rows)
        model["inputs"][e["name"]] = upgraded(o["inputs"], now)


def _claims_table(section: list[str]) -> tuple[int, int, list[str]] | None:
    """Where an old section's claims table starts and ends, and its perturbation labels; None without one."""
    head = next((i for i, line in enumerate(section) if line.startswith("| claim | paper | measured | status | premise")), None)
    if head is None:
        return None
    end = next((i for i in range(head + 2, len(section)) if not section[i].startswith("|")), len(section))
    return head, end, _cells(section[head])[5:]


def _claim_name(cell: str) -> tuple[str, str]:
    """(claim, its " (control)" / " (accounting)" tags) from a claims table's first cell."""
    m = re.fullmatch(r"(.*?)((?: \((?:control|accounting)\))*)", cell)
    return m.group(1), m.group(2)


def _old_status(cell: str) -> str:
    """A perturbation cell's status without its "(run FAILED)" / "(stale)" marks; "not run" for "–"."""
    status = cell.replace(" (run FAILED)", "").replace(" (stale)", "")
    return "not run" if status == "–" else status


def _keep_perturbations(e: dict[str, Any], section: list[str]) -> None:
    """A store run replaced a section whose inputs are this run's (a tuned re-run, e.g. ``--force``): the
    old section's perturbation columns that the store does not hold are kept, since they were judged
    on the same inputs, and count in k/n against the new run's tuned statuses."""
    table = _claims_table(section)
    if table is None:
        return
    head, end, labels = table
    runs = _parse_robustness_runs(section)
    have = {k for r in e["claims"] for k in r["off_tuned"]["perturbations"]}
    missing = [label for label in labels if label not in have and label in runs]
    if not missing:
        return
    old_cells = {}
    for line in section[head + 2:end]:
        cells = _cells(line)
        old_cells[_claim_name(cells[0])[0]] = dict(zip(labels, cells[5:]))
    for r in e["claims"]:
        for label in missing:
            r["off_tuned"]["perturbations"][label] = {**runs[label],
                                                      "status": _old_status(old_cells.get(r["claim"], {}).get(label, "–"))}
    e["robustness"] = _robustness(e["claims"])


def _old_board(text: str, flavour: str) -> dict[str, dict[str, Any]]:
    """{experiment: its row, section lines and recorded inputs} for each experiment the file shows
    with a run; {} for a file of another flavour or one dtlab reproduce did not write."""
    try:
        old_flavour, recorded = read_inputs(text)
    except ValueError:
        return {}
    if old_flavour != flavour:
        return {}
    rows, sections = _old_rows(text), _old_sections(text)
    return {name: {"row": rows[name], "section": sections[name], "inputs": rec} for name, rec in recorded.items()
            if name in rows and len(_cells(rows[name])) == 7 + len(STATUS_COLUMNS)
            and name in sections and _parse_run_line(_run_line(sections[name]) or "") is not None}


def summary_rows(text: str) -> dict[str, dict[str, Any]]:
    """{experiment: its summary row parsed} of a RESULTS.md: headline, counts by status, accounting,
    robustness k/n, wall seconds and peak MB (what benchmarks/bench_reproduce.py reads)."""
    return {name: _parse_row(row) for name, row in _old_rows(text).items()
            if len(_cells(row)) == 7 + len(STATUS_COLUMNS)}


def _old_rows(text: str) -> dict[str, str]:
    """{experiment: its summary-table row}."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"\| \[([^\]]+)\]\(#", line)
        if m:
            out.setdefault(m.group(1), line)
    return out


def _old_sections(text: str) -> dict[str, list[str]]:
    """{experiment: its section's lines, heading to the blank line before the next heading}."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("## ") and line != "## Summary"]
    end = next((i for i, line in enumerate(lines) if line.startswith(SECTION_END)), len(lines))
    out = {}
    for i, start in enumerate(starts):
        stop = starts[i + 1] if i + 1 < len(starts) else end
        out.setdefault(lines[start][3:].strip(), lines[start:stop])
    return out


def _old_machines(text: str) -> list[str]:
    """The machines the file's header names. The file names them for the whole board, not per
    experiment, so a carried experiment is credited with all of them (exact when there is one)."""
    m = re.search(r"^- \*\*Machine:\*\* (.*)$", text, re.M)
    return [] if not m or m.group(1) == "not recorded" else m.group(1).split("; ")


def _run_line(section: list[str]) -> str | None:
    return next((line for line in section if line.startswith("Run `")), None)


def _parse_run_line(line: str) -> dict[str, str] | None:
    """Run name, id, code version and date from "Run `name` (`id`) · code X · YYYY-MM-DD HH:MM UTC · wall ..."."""
    m = re.match(r"Run `(?P<run_name>[^`]*)` \(`(?P<run_id>[^`]*)`\) · code (?P<code_version>\S*) · "
                 r"(?P<date>\d{4}-\d{2}-\d{2} \d{2}:\d{2}) UTC", line)
    return m.groupdict() if m else None


def _parse_robustness_runs(section: list[str]) -> dict[str, dict[str, Any]]:
    """{perturbation: code version, date, run_failed, stale} from the section's "Robustness runs:" line."""
    line = next((x for x in section if x.startswith("Robustness runs: ")), "")
    return {m["label"]: {"code_version": m["code"], "date": m["date"], "run_failed": bool(m["failed"]),
                         "stale": bool(m["stale"])}
            for m in re.finditer(r"(?P<label>\S+) \(code (?P<code>[^,]*), (?P<date>[^,)]*) UTC(?P<failed>, run FAILED)?"
                                 r"(?P<stale>, stale[^)]*)?\)", line[len("Robustness runs: "):])}


def _parse_duration(text: str) -> float | None:
    """Seconds from what :func:`duration` writes ("17m36s", "3h54m"); None for "–"."""
    m = re.fullmatch(r"(?:(\d+)h(\d+)m|(\d+)m(\d+)s)", text.strip())
    if not m:
        return None
    h, hm, m_, s = (int(g) if g else 0 for g in m.groups())
    return float(h * 3600 + hm * 60 + m_ * 60 + s)


def _parse_fraction(text: str) -> tuple[int, int]:
    """(k, n) from "k/n"; (0, 0) for "–"."""
    m = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _cells(row: str) -> list[str]:
    """A markdown table row's cells, pipes and line breaks unescaped."""
    return [c.strip().replace("\\|", "|").replace("<br>", "\n") for c in re.split(r"(?<!\\)\|", row)[1:-1]]


def _parse_row(row: str) -> dict[str, Any]:
    """Headline, counts by status, accounting, robustness k/n, wall and peak memory from a summary row."""
    cells = _cells(row)
    ours = re.fullmatch(r"(.*?) ?\(([^()]*)\)", cells[2], re.S)
    n = len(STATUS_COLUMNS)
    held, judged = _parse_fraction(cells[3 + n])
    peak = re.fullmatch(r"([\d.]+) MB", cells[6 + n])
    return {"headline": {"claim": "", "paper": cells[1], "ours": ours.group(1) if ours else cells[2],
                         "status": ours.group(2) if ours else ""},
            "counts": {s: int(c) if c.isdigit() else 0 for s, c in zip(STATUS_COLUMNS, cells[3:3 + n])},
            "accounting": {"held": held, "judged": judged}, "robustness_kn": _parse_fraction(cells[4 + n]),
            "wall_s": _parse_duration(cells[5 + n]), "peak_mb": float(peak.group(1)) if peak else None}


def _carried_entry(name: str, old: dict[str, Any], machines: list[str]) -> dict[str, Any]:
    """The model's fields of a carried experiment (what the header and summary count), its row and
    section as the old file has them with one carried mark."""
    run, row = _parse_run_line(_run_line(old["section"]) or ""), _parse_row(old["row"])
    runs = _parse_robustness_runs(old["section"])
    k, n = row.pop("robustness_kn")
    cold = _parse_cold_prepare(old["section"])
    return {**run, **row, "stale": [], "machine": "", "machines": machines, "claims": [], "plots": [],
            "prepare": {**cold, "built": ["(as the carried section says)"]} if cold is not None else None,
            "robustness": {"k": k, "n": n, "kept": None, "labels": sorted(runs), "runs": runs},
            "carried": {"row": _mark_row(name, old["row"]), "section": _mark_section(old["section"])}}


def _merge_robustness(e: dict[str, Any], rows: list[dict]) -> None:
    """Add to a carried experiment the perturbation runs the store holds (``rows``: its claim rows, no
    tuned run among them): each becomes a column of the carried claims table (replacing a column of
    the same name), is named in the "Robustness runs" line, and counts in k/n against the carried
    tuned statuses, as :func:`_robustness` counts a tuned run in the store. The tuned run's inputs are
    this checkout's (it is carried), so the perturbation is judged against the same code."""
    section, row = list(e["carried"]["section"]), e["carried"]["row"]
    table = _claims_table(section)
    if table is None:
        return
    head, end, old_labels = table
    runs = dict(e["robustness"]["runs"])
    by_claim = {r["claim"]: r for r in rows}
    for r in rows:
        for label, p in r["off_tuned"]["perturbations"].items():
            runs[label] = {f: p.get(f, "") for f in ("code_version", "date", "run_failed")} | {"stale": bool(p.get("stale"))}
    labels = sorted(set(old_labels) | set(runs))
    table = ["| claim | paper | measured | status | premise" + "".join(f" | {p}" for p in labels) + " |",
             "|---|---|---|---|---" + "|---" * len(labels) + "|"]
    judged = []   # the carried table as board rows, the store's perturbations merged in: what _robustness counts
    for line in section[head + 2:end]:
        raw = re.split(r"(?<!\\)\|", line)[1:-1]
        cells = _cells(line)
        name, tags = _claim_name(cells[0])
        old_cells = dict(zip(old_labels, cells[5:]))
        stored = (by_claim[name]["off_tuned"]["perturbations"] if name in by_claim else {})
        perts = {}
        for label in labels:
            if label in stored:
                perts[label] = stored[label]
            else:
                perts[label] = runs.get(label, {}) | {"status": _old_status(old_cells.get(label, "–"))}
        judged.append({"gate": "(control)" not in tags, "kind": "accounting" if "(accounting)" in tags else "",
                       "status": cells[3], "off_tuned": {"perturbations": perts}})
        offs = [perturbation_status(perts[label]) if label in stored else old_cells.get(label, "–") for label in labels]
        table.append("|" + "|".join(raw[:5]) + "".join(f"| {_md(c)} " for c in offs) + "|")
    rb = _robustness(judged)
    body = [line for line in section[:head] if not line.startswith("Robustness runs: ")]
    while len(body) > 1 and body[-1] == "" and body[-2] == "":
        body.pop()
    section = body + [_robustness_line(rb["labels"], rb["runs"]), ""] + table + section[end:]
    parts = re.split(r"(?<!\\)(\|)", row)   # cells and their pipes, so only the robustness cell changes
    cell_at = 2 * (1 + 4 + len(STATUS_COLUMNS))
    parts[cell_at] = f" {rb['k']}/{rb['n']} " if rb["n"] else " – "
    e["carried"] = {"row": "".join(parts), "section": section}
    e["robustness"] = rb


def _mark_row(name: str, row: str) -> str:
    """The row with its name cell marked carried (once; a stale mark dropped: its inputs are current)."""
    return re.sub(r"^\| \[[^\]]*\]\(#[^)]*\)(?: \((?:stale|carried)\))* \|",
                  lambda _: f"| [{name}](#{_anchor(name)}) {ROW_CARRIED} |", row, count=1)


def _mark_section(section: list[str]) -> list[str]:
    """The section with its run line marked carried (once) and any stale note dropped."""
    out = []
    for line in section:
        if line.startswith("**Stale**: "):
            continue
        if line.startswith("Run `"):
            line = line.replace(f" · {CARRIED}", "") + f" · {CARRIED}"
        if not (line == "" and out and out[-1] == ""):
            out.append(line)
    return out


# ------------------------------------------------------------------------------------------ render
def render(model: dict[str, Any]) -> str:
    """RESULTS.md's text (deterministic: the model only)."""
    debug = model["flavour"] != "full"
    lines = ["# dtlab results", ""]
    if debug:
        lines += ["> **DEBUG FLAVOUR.** These figures come from the tiny debug configurations (`debug=true`), "
                  "generated to test `dtlab reproduce`; claims are expected to fail. The board is the full flavour.", ""]
    exps = model["experiments"]
    ran = [e for e in exps if e["run_id"]]
    carried = sum(bool(e.get("carried")) for e in exps)
    dates = model["dates"]
    lines += ["Generated by `dtlab reproduce` from the runs store; never edit by hand. "
              "`dtlab reproduce --check` says whether it is current for your checkout.", "",
              f"- **Code version:** {', '.join(model['code_versions']) or '–'}"
              + (f" (dtlab {', '.join(model['dtlab_versions'])})" if model["dtlab_versions"] else "")
              + (f"; robustness runs: {', '.join(model['robustness_code_versions'])}"
                 if model.get("robustness_code_versions") else ""),
              f"- **Runs:** {dates[0] + ' to ' + dates[-1] + ' UTC' if dates else 'none'} · "
              f"{len(ran)} of {len(exps)} experiments"
              + (f" ({carried} carried from the previous RESULTS.md)" if carried else "")
              + f" · flavour {model['flavour']}",
              f"- **Machine:** {'; '.join(model['machines']) or 'not recorded'}",
              f"- **Total wall time:** {duration(model['total_wall_s'])}" + _cold_text(model), ""]
    emp = {s: sum(e["counts"].get(s, 0) for e in ran) for s in dict.fromkeys(
        [*STATUS_COLUMNS, *(s for e in ran for s in e["counts"])])}
    acc_h, acc_n = sum(e["accounting"]["held"] for e in ran), sum(e["accounting"]["judged"] for e in ran)
    stale = [e["name"] for e in ran if e["stale"]]
    lines += ["## Summary", "",
              f"**{sum(emp.values())} gated claims judged: " + " · ".join(f"{n} {s}" for s, n in emp.items()) + "**"
              + f" · accounting checks (true by construction, counted apart): {acc_h}/{acc_n} hold"
              + (f" · stale: {', '.join(stale)}" if stale else ""), "",
              "| experiment | paper's headline | ours | " + " | ".join(STATUS_COLUMNS)
              + " | accounting | robustness | wall | peak memory |",
              "|---|---|---|" + "---:|" * len(STATUS_COLUMNS) + "---:|---:|---:|---:|"]
    for e in exps:
        name = f"[{e['name']}](#{_anchor(e['name'])})" + (" (stale)" if e["stale"] else "")
        if e.get("carried"):
            lines.append(e["carried"]["row"])
            continue
        if not e["run_id"]:
            lines.append(f"| {name} | not run |  |" + " |" * len(STATUS_COLUMNS) + "  |  |  |  |")
            continue
        h = e["headline"] or {}
        rob = f"{e['robustness']['k']}/{e['robustness']['n']}" if e["robustness"]["n"] else "–"
        acc = f"{e['accounting']['held']}/{e['accounting']['judged']}" if e["accounting"]["judged"] else "–"
        peak = f"{e['peak_mb']:.0f} MB" if isinstance(e["peak_mb"], (int, float)) else "–"
        lines.append(f"| {name} | {_md(_short(h.get('paper', '')))} | {_md(_short(h.get('ours', ''), 60))}"
                     f" ({h.get('status', '')}) | " + " | ".join(str(e["counts"].get(s, 0)) for s in STATUS_COLUMNS)
                     + f" | {acc} | {rob} | {duration(e['wall_s'])} | {peak} |")
    lines += ["", "The headline is each experiment's first gated claim that is not an accounting check or a "
              "\"(platform)\" check; "
              "robustness k/n: of n perturbations run, k under which no gated claim holding in the tuned run "
              "fails; peak memory: the run's process tree (driver and its Ray processes), sampled every 0.5 s.", ""]
    for e in exps:
        lines += e["carried"]["section"] if e.get("carried") else _section(e)
    lines += _inputs_block(model)
    return "\n".join(lines) + "\n"


def _cold_text(model: dict[str, Any]) -> str:
    """The header's note on cold prepares: the passes reproduce timed apart from the runs' walls (a pass
    the board shared counted once)."""
    cold = model.get("cold_prepare") or {}
    own, shared = cold.get("own") or {}, cold.get("shared") or []
    if not own and not shared:
        return ""
    parts = [f"one pass shared by {', '.join(sorted(p['experiments']))} {duration(p['seconds'])}" for p in shared]
    parts += [f"{k} {duration(v)}" for k, v in sorted(own.items())]
    total = sum(own.values()) + sum(p["seconds"] for p in shared)
    return (f" (runs with a warm prepare cache where reproduce ran a prepare pass first); cold prepare passes: "
            f"{duration(total)} ({', '.join(parts)})")


def _section(e: dict[str, Any]) -> list[str]:
    out = [f"## {e['name']}", ""]
    links = " · ".join(f"[{label}]({href})" for label, href in e["links"])
    if not e["run_id"]:
        return out + [f"Not run. {links}", ""]
    out += [f"Run `{e['run_name']}` (`{e['run_id']}`) · code {e['code_version']} · {e['date']} UTC · "
            f"wall {duration(e['wall_s'])}{prepare_text(e.get('prepare'))}" + (f" · {links}" if links else ""), ""]
    if e["stale"]:
        out += [f"**Stale**: changed since this run: {', '.join(e['stale'])}.", ""]
    perts = e["robustness"]["labels"]
    if perts:
        out += [_robustness_line(perts, e["robustness"]["runs"]), ""]
    out += ["| claim | paper | measured | status | premise" + "".join(f" | {p}" for p in perts) + " |",
            "|---|---|---|---|---" + "|---" * len(perts) + "|"]
    for r in e["claims"]:
        tag = "" if r["gate"] else " (control)"
        tag += " (accounting)" if r["kind"] == "accounting" else ""
        premise = ""
        if r["premise"]:
            met = {True: "met", False: "not met", None: "unknown"}[r["premise_holds"]] if r["status"] != "not run" else ""
            premise = f"{met}: `{r['premise']}`" + (f"; {r['premise_measured']}" if r["premise_measured"] else "")
        offs = "".join(f" | {perturbation_status(r['off_tuned']['perturbations'][p])}"
                       if p in r["off_tuned"]["perturbations"] else " | –" for p in perts)
        out.append(f"| {_md(r['claim'] + tag)} | {_md(r['paper'])} | {_md(r['measured_labelled'] or r['measured'] or '–')}"
                   f" | {r['status']} | {_md(premise)}{offs} |")
    out.append("")
    if e["plots"]:
        out += ["Plots: " + " · ".join(f"[{name}]({href})" for name, href in e["plots"]), ""]
    return out


def _robustness_line(perts: list[str], runs: dict[str, dict[str, Any]]) -> str:
    """"Robustness runs: p (code X, date UTC[, run FAILED][, stale ...]) · ..." (what
    :func:`_parse_robustness_runs` reads back)."""
    return "Robustness runs: " + " · ".join(
        f"{p} (code {runs[p]['code_version']}, {runs[p]['date']} UTC" + (", run FAILED" if runs[p]["run_failed"] else "")
        + (", stale: its code has changed since, not counted" if runs[p].get("stale") else "") + ")" for p in perts)


def _inputs_block(model: dict[str, Any]) -> list[str]:
    """Each experiment's recorded inputs, one JSON line each, for `dtlab reproduce --check`."""
    body = [json.dumps({"flavour": model["flavour"]}, sort_keys=True)]
    body += [json.dumps({"experiment": k, **v}, sort_keys=True) for k, v in sorted(model["inputs"].items())]
    return ["<details><summary>Recorded inputs (what <code>dtlab reproduce --check</code> compares)</summary>", "",
            BEGIN, "```json", *body, "```", END, "", "</details>"]


def read_inputs(text: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """(flavour, {experiment: recorded inputs}) from a RESULTS.md's inputs block; ValueError without one."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"no recorded inputs ({BEGIN} ... {END}): not a file dtlab reproduce wrote")
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    flavour, recorded = "full", {}
    for line in block.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        if "experiment" in d:
            recorded[d.pop("experiment")] = d
        else:
            flavour = d.get("flavour", flavour)
    return flavour, recorded


def summary_html(model: dict[str, Any]) -> str:
    """The summary table as HTML, for runs/reports/scoreboard.html: the experiments RESULTS.md shows
    with a run, carried ones included (marked "(carried)"; their figures as the old row had them)."""
    import html

    e_ = html.escape
    rows = ["<h2>Summary (as in RESULTS.md)</h2><table id='summary'><tr><th>experiment</th><th>paper's headline</th>"
            "<th>ours</th>" + "".join(f"<th>{s}</th>" for s in STATUS_COLUMNS)
            + "<th>accounting</th><th>robustness</th><th>wall</th><th>peak memory</th></tr>"]
    for e in model["experiments"]:
        if not e["run_id"]:
            continue
        h = e["headline"] or {}
        peak = f"{e['peak_mb']:.0f} MB" if isinstance(e["peak_mb"], (int, float)) else "–"
        mark = f" {ROW_CARRIED}" if e.get("carried") else " (stale)" if e["stale"] else ""
        rows.append(f"<tr><td>{e_(e['name'])}{mark}</td><td>{e_(_short(h.get('paper', '')))}</td>"
                    f"<td>{e_(h.get('ours', ''))} ({e_(h.get('status', ''))})</td>"
                    + "".join(f"<td>{e['counts'].get(s, 0)}</td>" for s in STATUS_COLUMNS)
                    + f"<td>{e['accounting']['held']}/{e['accounting']['judged']}</td>"
                    f"<td>{e['robustness']['k']}/{e['robustness']['n']}</td><td>{duration(e['wall_s'])}</td>"
                    f"<td>{peak}</td></tr>")
    rows.append("</table>")
    return "".join(rows)


def write(client, path: Path, flavour: str = "full", current=None, previous: Path | None = None) -> dict[str, Any]:
    """Build and write RESULTS.md at ``path`` (its plots under ``results/`` beside it); the model.
    Current experiments are carried from ``previous`` (default: the RESULTS.md already at ``path``);
    a carried section's plot links stay relative to the file it came from."""
    path = Path(path)
    source = Path(previous) if previous is not None else path
    previous = source.read_text() if source.is_file() else None
    model = build(client, flavour, current=current, plots_dir=path.parent / "results" / "plots", base=path.parent,
                  previous=previous)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(model))
    return model
