"""Node reasons and other user-visible text built from user-controlled strings.

Process names, file paths and job comments are chosen by users: they may hold
newlines, quotes, shell syntax or bytes that are not UTF-8. A node reason must stay one
readable line of at most 255 bytes (what `scontrol show node` and `sinfo -R` show), so
every string that reaches Slurm goes through here.
"""
from __future__ import annotations

from . import lazyre

REASON_LIMIT = 255
_CONTROL = lazyre.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_QUOTES = lazyre.compile(r"[\"'`]")
_SPACES = lazyre.compile(r"\s+")


def clean_text(text) -> str:
    """Any str or bytes as valid UTF-8 text: undecodable bytes become U+FFFD."""
    if isinstance(text, bytes):
        return text.decode("utf-8", "replace")
    text = str(text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        # Lone surrogates from os.fsdecode of non-UTF-8 names.
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


# Characters that move the cursor, rewrite a terminal (ESC), break a line or reorder
# text (bidi controls): none of them may reach a report, a log line or Slurm from a user.
_UNPRINTABLE = lazyre.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]")


def _escape(m) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text) -> str:
    """Any user-derived str or bytes as valid UTF-8 with every control character written
    out (`\\x1b`, `\\x0a`): the one helper every user string passes where it enters a
    finding, so no output (text, JSON, syslog, node reason, AdminComment, Prometheus)
    carries a control character a user chose."""
    text = clean_text(text)
    # isprintable() is false for every character _UNPRINTABLE matches (and for more):
    # most text needs no regular expression at all.
    if text.isprintable() or _UNPRINTABLE.search(text) is None:
        return text
    return _UNPRINTABLE.sub(_escape, text)


def printable_tree(value):
    """printable() on every string inside dicts, lists and tuples (finding evidence)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(k) if isinstance(k, str) else k: printable_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable_tree(v) for v in value]
    if isinstance(value, bytes):
        return printable(value)
    return value


def one_line(text) -> str:
    """Control characters to spaces, quotes to '?', runs of blanks to one space."""
    text = _CONTROL.sub(" ", clean_text(text))
    text = _QUOTES.sub("?", text)
    return _SPACES.sub(" ", text).strip()


def truncate_bytes(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    cut = data[:max(0, limit - 3)].decode("utf-8", "ignore").rstrip()
    return cut + "…"


# Our mark: every node reason slurm-hooks sets ends in it. At the end, so that the first
# 20 characters, all `sinfo -R` shows, are the key words (`fs /scratch write hung`);
# anchored there, because process names and paths that users choose sit inside our
# reasons: a user can put the mark anywhere in the text, never after our last word.
# Slurm's own notes may follow it: on a reboot (` : reboot complete`), and from 25.11 on
# a node whose slurmd stopped answering (` : Not responding`, added to any reason).
MARK = "[slurm-hooks]"
SLURM_NOTES = (" : reboot issued", " : reboot complete", " : reboot timed out", " : Not responding")
# What older releases started every node reason with (the `reason_prefix` setting's
# default): a node they drained is still ours after an upgrade.
LEGACY_PREFIX = "slurm-hooks:"


def make_reason(parts: list[str], limit: int = REASON_LIMIT) -> str:
    """`part1; part2 (+N more) [slurm-hooks]`, one clean line within limit bytes."""
    room = limit - len(MARK.encode()) - 1
    items = [one_line(p) for p in parts if one_line(p)]
    body = "; ".join(items)
    if len(body.encode("utf-8")) <= room or len(items) <= 1:
        return mark(body, limit)
    # Keep as many whole parts as fit, then say how many were left out.
    for keep in range(len(items) - 1, 0, -1):
        text = f"{'; '.join(items[:keep])} (+{len(items) - keep} more)"
        if len(text.encode("utf-8")) <= room:
            return mark(text, limit)
    return mark(f"{items[0]} (+{len(items) - 1} more)", limit)


def mark(words: str, limit: int = REASON_LIMIT) -> str:
    """Words of ours as a node reason: cut to fit, then the mark, always last."""
    words = one_line(words)
    return f"{truncate_bytes(words, limit - len(MARK.encode()) - 1)} {MARK}".lstrip()


def _without_notes(reason: str) -> str:
    reason = reason.rstrip()
    changed = True
    while changed:
        changed = False
        for note in SLURM_NOTES:
            if reason.endswith(note):
                reason, changed = reason[:-len(note)].rstrip(), True
    return reason


def is_ours(reason: str, prefix: str = LEGACY_PREFIX) -> bool:
    """Did slurm-hooks set this node reason (without Slurm's stamp)? It ends in our mark,
    Slurm's reboot notes aside; or it starts with the prefix of older releases."""
    body = _without_notes(reason)
    return body == MARK or body.endswith(" " + MARK) or bool(prefix.strip()) and reason.startswith(prefix)


def words_of(reason: str, prefix: str = LEGACY_PREFIX) -> str:
    """A reason of ours without its mark (or old prefix) and Slurm's reboot notes: the
    words people read."""
    body = _without_notes(reason)
    if body == MARK or body.endswith(" " + MARK):
        return body[:-len(MARK)].strip()
    if prefix.strip() and body.startswith(prefix):
        return body[len(prefix):].strip()
    return body


def with_note(reason: str, note: str, limit: int = REASON_LIMIT) -> str:
    """A reason of ours with `note` added to its words, the mark still last: the words
    before the note give way when the whole does not fit."""
    words, note = one_line(words_of(reason)), one_line(note)
    room = limit - len(MARK.encode()) - len(note.encode()) - 2
    return mark(f"{truncate_bytes(words, room)} {note}", limit)


# The machine-readable cause of a drain of ours, kept in the node's Comment (set with the
# drain, cleared with our resume): `slurm-hooks:cause {"check":...,"where":...,
# "incident":...,"since":...}`. The JSON has no blank (escaped as \u0020) and no `|`
# (\u007c), so no reader of `scontrol -o` or `sinfo -O` lines can cut it apart.
CAUSE_TAG = "slurm-hooks:cause"
CAUSE_LIMIT = 1000
MOUNTS_PUBLISHED = 4          # suspect mounts a node's cause names (CAUSE_LIMIT bounds the text)
UNKNOWN_CAUSE = "unknown cause"


def cause_text(check: str, where: str, incident: str, since: str, mounts: list | None = None,
               held: bool = False, claim: float | None = None) -> str:
    """`mounts`: the node's suspect mounts, [source, fstype, mountpoint, since, kind,
    said at] each (decide/mount_incident.py), what the other nodes tell an outage of the
    storage by; `held`: the node names them while the drain-storm breaker holds its
    drain back (not drained, yet standing by its word); `claim`: when the node claimed
    its place under the breaker's limit before draining (decide/breaker.py)."""
    import json
    where = one_line(where)[:400]
    doc: dict = {"check": one_line(check), "where": where, "incident": one_line(incident)[:400], "since": since}
    if mounts:
        doc["mounts"] = [[one_line(str(x))[:120] for x in m] for m in mounts[:MOUNTS_PUBLISHED]]
    if held:
        doc["held"] = True
    if claim is not None:
        doc["claim"] = round(claim, 3)
    data = json.dumps(doc, separators=(",", ":"), ensure_ascii=True)
    return f"{CAUSE_TAG} " + data.replace(" ", "\\u0020").replace("|", "\\u007c")


def cause_with(text: str, mounts: list | None, held: bool = False, claim: float | None = None) -> str:
    """Our cause `text` (cause_text's form, alone) naming `mounts` instead of what it
    named, saying `held` or not, and carrying `claim` (never an earlier one); any other
    text as it is."""
    doc = read_cause(text)
    if doc is None:
        return text
    return cause_text(doc["check"], str(doc.get("where") or ""), str(doc.get("incident") or ""),
                      str(doc.get("since") or ""), mounts, held, claim)


def is_our_cause(text: str) -> bool:
    return text.startswith(CAUSE_TAG + " {")


def _our_part(text: str) -> tuple[str, str]:
    """(our cause, the rest) of a Comment: our cause is the tag and its blank-free JSON;
    whatever an admin wrote beside it is the rest."""
    if not is_our_cause(text):
        return "", text.strip()
    ours, _, rest = text.partition(" {")[2].partition(" ")
    return f"{CAUSE_TAG} {{{ours}", rest.strip()


def our_cause(text: str) -> str:
    """Our cause alone out of a Comment ("" when it holds none)."""
    return _our_part(text)[0]


def without_our_cause(text: str) -> str:
    """The Comment once our cause is taken out of it: an admin's words stay."""
    return _our_part(text)[1]


def read_cause(text: str) -> dict | None:
    """The cause a drain of ours recorded, None when `text` is not one (empty, an
    admin's comment, a drain by an older release)."""
    import json
    ours = _our_part(text)[0]
    if not ours:
        return None
    try:
        data = json.loads(ours[len(CAUSE_TAG) + 1:])
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("check"), str) else None


def cause_group(cause: dict | None) -> str:
    """What an outage is grouped by: the check and where it failed, from the recorded
    cause alone (never the reason's words)."""
    if not cause:
        return UNKNOWN_CAUSE
    return f"{cause['check']} {cause.get('where') or ''}".strip()


def shorten_path(path: str, limit: int = 80) -> str:
    """Keep the start and the end of a long path, which say the most."""
    path = one_line(path)
    if len(path) <= limit:
        return path
    half = (limit - 1) // 2
    return path[:half] + "…" + path[-(limit - 1 - half):]


# Slurm's generic reasons: what slurmctld writes when a hook fails or a task cannot be
# killed. slurm-hooks puts its own precise reason in their place, but only when it
# knows the cause (its own hook failed, or it diagnosed the task): never over an
# admin's words. Matched by prefix: from Slurm 25.05 on the last one reads
# `Kill task failed (JobId=N StepId=S)`.
PROLOG_ERROR, EPILOG_ERROR, KILL_TASK_FAILED = "Prolog error", "Epilog error", "Kill task failed"


def is_generic(reason: str, generic: str) -> bool:
    """Is `reason` one of Slurm's generic reasons among `generic` ("A|B")?"""
    return any(g and reason.startswith(g) for g in generic.split("|"))


def duration(seconds: float, at_least: bool = False) -> str:
    """12s, 4m10s, 1h03m (`≥` in front for a lower bound)."""
    s = max(0, int(seconds))
    if s < 60:
        text = f"{s}s"
    elif s < 3600:
        text = f"{s // 60}m{s % 60:02d}s"
    else:
        text = f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"≥{text}" if at_least else text
