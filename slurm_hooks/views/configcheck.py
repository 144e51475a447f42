"""`slurm-hooks config check`: the file is valid (config.load); this module adds what
only this node can tell: whether each filesystem to probe is there as written.

A mistyped probe path, a mountpoint this node does not have or an fstype that is not
what is mounted passes validation and then drains the node at its first health check.
Each is a warning naming the file and line (`--strict`: an error, for CI of a
configuration repository). The mounts come from /proc/self/mountinfo alone; whether a
path exists is asked in a hang-safe child with a deadline (host/runner.py), never in this
process: the path may be on a hung mount.
"""
from __future__ import annotations

import os

# How long one path may take to say whether it exists: a live mount answers in
# milliseconds, and `config check` must stay quick on a node with a hung one.
PATH_TIMEOUT = 5.0


def probe_warnings(path: str, mounts=None) -> list[str]:
    """`FILE:LINE: KEY: problem` for each configured filesystem this node would fail."""
    import yaml

    from ..host.mounts import MountTable
    with open(path, "rb") as f:
        root = yaml.compose(f.read(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    table = mounts if mounts is not None else MountTable.current()
    entries = list(_filesystem_entries(root, yaml))
    out, to_probe = [], []
    for key, fields in entries:
        problem = _mount_problem(fields, table)
        if problem:
            name, node, text = problem
            out.append(f"{path}:{node.start_mark.line + 1}: {key}.{name}: {text}")
        elif "path" in fields:
            to_probe.append((key, fields["path"]))
    out += [f"{path}:{node.start_mark.line + 1}: {key}.path: {text}" for key, node, text in _missing_paths(to_probe)]
    return out


def _filesystem_entries(root, yaml):
    """(key, {setting: value node}) for every item of `filesystems`, at the top level
    and in each node group (another node's group is still this file's mistake only if
    it names this node's mounts, but a typo is a typo: checked all the same)."""
    for prefix, mapping in _sections(root, yaml):
        seq = _value(mapping, "filesystems", yaml)
        if not isinstance(seq, yaml.SequenceNode):
            continue
        for i, item in enumerate(seq.value):
            if isinstance(item, yaml.MappingNode):
                fields = {k.value: v for k, v in item.value
                          if isinstance(v, yaml.ScalarNode) and k.value in ("path", "mountpoint", "fstype")}
                yield f"{prefix}filesystems[{i}]", fields


def _sections(root, yaml):
    if not isinstance(root, yaml.MappingNode):
        return
    yield "", root
    groups = _value(root, "node_groups", yaml)
    for i, g in enumerate(groups.value if isinstance(groups, yaml.SequenceNode) else ()):
        settings = _value(g, "settings", yaml)
        if isinstance(settings, yaml.MappingNode):
            yield f"node_groups[{i}].settings.", settings


def _value(mapping, key: str, yaml):
    if not isinstance(mapping, yaml.MappingNode):
        return None
    return next((v for k, v in mapping.value if getattr(k, "value", None) == key), None)


def _mount_problem(fields: dict, table):
    """(setting, its value node, problem) as the filesystem check would see it (checks/filesystem.py
    `_mount_problem`), or None."""
    mp, fstype, p = fields.get("mountpoint"), fields.get("fstype"), fields.get("path")
    if mp is not None and mp.value:
        m = table.at(mp.value)
        if m is None:
            return "mountpoint", mp, (f"mountpoint {mp.value} is not in this node's mount table (/proc/self/mountinfo): "
                        "every health check here would find it missing and drain the node")
    elif p is not None:
        m = table.holding(p.value)
    else:
        return None
    if fstype is not None and fstype.value and m is not None and m.fstype != fstype.value:
        return "fstype", fstype, (f"fstype {fstype.value} does not match this node: {m.mountpoint} is {m.fstype} "
                        "here; every health check would drain the node")
    return None


def _missing_paths(entries):
    """(key, node, problem) for each path that is not a directory here, asked of all
    paths at once in hang-safe children."""
    from ..host.runner import DONE, Runner, Task
    if not entries:
        return []
    tasks = [Task(f"config-check:{i}", _is_dir, (node.value,), PATH_TIMEOUT) for i, (_, node) in enumerate(entries)]
    outcomes = Runner().run(tasks)
    out = []
    for i, (key, node) in enumerate(entries):
        o = outcomes[f"config-check:{i}"]
        if o.status != DONE:
            out.append((key, node, f"{node.value} did not answer within {PATH_TIMEOUT:g}s ({o.status}): "
                        "the filesystem under it may be hung"))
        elif not o.value:
            out.append((key, node, f"{node.value} does not exist (or is not a directory) on this node: the "
                        f"probe would fail and drain the node. The probe directory must exist: create it "
                        f"on the mounted filesystem (mkdir -p {node.value}, "
                        "with the filesystem mounted) or correct the path"))
    return out


def _is_dir(progress, path: str) -> bool:
    progress("stat")
    return os.path.isdir(path)


def probe_plan(cfg, mounts=None) -> dict:
    """What the filesystem check will probe on this node, as each hook runs it: each
    path, its mode, why it is there (listed in the file, default scratch, a network or
    FUSE mount found), its deadline per hook; and what it leaves alone (users' own FUSE
    mounts, and what lies under them). From the mount table alone: nothing is touched."""
    from ..checks.filesystem import HOOKS, defaults, paths, targets
    from ..host.mounts import MountTable
    table = mounts if mounts is not None else MountTable.current()
    hooks = [h for h in HOOKS if h != "check" and (h == "healthcheck" or getattr(cfg, h).enabled)]
    if defaults(cfg).enabled == "false":
        return {"enabled": False, "probes": [], "left_alone": []}
    probes = []
    for t in targets(cfg, table):
        deadlines = {h: (t.timeout if h == "healthcheck" else min(t.timeout, getattr(cfg, h).fs_timeout))
                     for h in hooks}
        why = "listed in filesystems" if t.origin == "configured" else t.origin
        probes.append({"path": t.path, "mode": t.mode, "why": why, "deadlines": deadlines})
    left = [{"mountpoint": m.mountpoint, "fstype": m.fstype, "uid": table.user_owner(m)}
            for m in table if (m.is_network or m.is_fuse) and table.user_owned(m)]
    return {"enabled": True, "configured": bool(paths(cfg)), "probes": probes, "left_alone": left,
            "fusectl": _fusectl(cfg, table)}


def _fusectl(cfg, table) -> str:
    """What `config check` says of fusectl where it matters: a `fuse-abort` recovery
    writes there, and the stuck-task check asks it whether a FUSE mount of the node's
    has a request waiting. Nothing guarantees it is mounted (systemd does it); slurm-hooks
    mounts it itself when it needs it (host/fusectl.py)."""
    from ..checks.filesystem import paths
    from ..host.fusectl import FUSECTL
    aborts = any(fs.recover.method == "fuse-abort" for fs in paths(cfg))
    fuse = any(m.is_fuse and m.is_network and not table.user_owned(m) for m in table)
    if not aborts and not fuse:
        return ""
    m = table.at(FUSECTL)
    if m is not None and m.fstype == "fusectl":
        return f"fusectl: mounted at {FUSECTL}"
    why = "a fuse-abort recovery" if aborts else "the stuck-task check's look at a FUSE mount"
    return (f"fusectl: not mounted at {FUSECTL}; slurm-hooks mounts it (mount -t fusectl) before {why} needs it, "
            "and says so in the run's notes")


def render_plan(plan: dict) -> list[str]:
    if not plan["enabled"]:
        return ["filesystem probes: off (filesystem_defaults.enabled: false)"]
    lines = ["filesystem probes on this node (health check; prolog and epilog with their fs_timeout):"]
    width = max([len(p["path"]) for p in plan["probes"]] + [4])
    for p in plan["probes"]:
        times = ", ".join(f"{h} {s:g}s" for h, s in p["deadlines"].items())
        lines.append(f"  {p['path']:<{width}}  {p['mode']:<5}  {p['why']} ({times})")
    if not plan["probes"]:
        lines.append("  none: no path listed and no scratch or network mount found")
    if plan["left_alone"]:
        lines.append("left alone (users' own FUSE mounts: theirs to break):")
        lines += [f"  {m['mountpoint']} ({m['fstype']} of uid {m['uid']})" for m in plan["left_alone"]]
    if plan.get("fusectl"):
        lines.append(plan["fusectl"])
    return lines


def path_warnings(cfg) -> list[str]:
    """The warnings of path_check()."""
    return path_check(cfg)[0]


def path_check(cfg) -> tuple[list[str], list[str]]:
    """What a run would use that is not here as written: `KEY: problem` for the Slurm
    configuration file (scontrol waits 60 s for a missing one), and each directory a run
    writes in or reads from: one that does not exist while its parent does is named (a
    typo makes a run create a new directory, or find no site checks). Asked in hang-safe
    children: any of them may be on a hung mount."""
    from ..host.runner import DONE, Runner, Task
    wanted: list[tuple[str, str, str]] = []        # (key, path, what it must be)
    conf = cfg.slurm.conf or os.environ.get("SLURM_CONF")
    if conf:
        wanted.append(("slurm.conf" if cfg.slurm.conf else "SLURM_CONF", conf, "file"))
    # The built-in places are made by the installer (and a first run): only a place the
    # file names otherwise can be a typo.
    from ..core.config import Config
    if cfg.state_dir != Config.state_dir:
        wanted.append(("state_dir", cfg.state_dir, "dir"))
    if cfg.journal != Config.journal:
        wanted.append(("journal", os.path.dirname(cfg.journal) or ".", "dir"))
    if cfg.prometheus_textfile_dir and cfg.prometheus_textfile_dir != Config.prometheus_textfile_dir:
        wanted.append(("prometheus_textfile_dir", cfg.prometheus_textfile_dir, "dir"))
    site = getattr(cfg, "site_checks", None)
    if site is not None and site.enabled != "false" and site.dir != "/etc/slurm-hooks/checks.d":
        wanted.append(("site_checks.dir", site.dir, "sitedir"))
    tasks = [Task(f"config-path:{i}", _kind_of, (path,), PATH_TIMEOUT) for i, (_, path, _) in enumerate(wanted)]
    outcomes = Runner().run(tasks)
    out: list[str] = []
    notes: list[str] = []
    for i, (key, path, want) in enumerate(wanted):
        o = outcomes[f"config-path:{i}"]
        if o.status != DONE:
            out.append(f"{key}: {path} did not answer within {PATH_TIMEOUT:g}s ({o.status}): the filesystem "
                       "under it may be hung")
            continue
        kind, parent = o.value
        if want == "file" and kind != "file":
            out.append(f"{key}: {path} does not exist (or is not a file): scontrol would retry it for 60 s and "
                       "every Slurm call of a run would fail")
        elif want == "dir" and kind == "missing" and parent:
            # Its parent is there: a run makes it. Named, so that a typo is seen.
            notes.append(f"{key}: {path} does not exist yet: the first run creates it in "
                         f"{os.path.dirname(path.rstrip('/'))}")
        elif want == "dir" and kind == "missing":
            out.append(f"{key}: {path} does not exist and neither does its parent: a run could not write there")
        elif want in ("dir", "sitedir") and kind not in ("dir", "missing"):
            out.append(f"{key}: {path} is not a directory")
        elif want == "sitedir" and kind == "missing":
            out.append(f"{key}: {path} does not exist: no site check would run (a typo?)")
    return out, notes


def _kind_of(progress, path: str) -> tuple[str, bool]:
    """("file" | "dir" | "other" | "missing", whether its parent directory exists)."""
    progress("stat")
    parent = os.path.isdir(os.path.dirname(path.rstrip("/")) or "/")
    if os.path.isdir(path):
        return "dir", parent
    if os.path.isfile(path):
        return "file", parent
    return ("other" if os.path.lexists(path) else "missing"), parent
