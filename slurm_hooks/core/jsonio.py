"""JSON for the healthy path, without importing the `json` package.

Importing `json` imports `re` and with it `enum`: about 10 ms of every process start
here, more than a healthy health check's own work. The encoding and decoding
themselves are done by the interpreter's C accelerator `_json`, which is what `json`
calls too; this module drives it directly, with `json`'s own settings, so the text and
values are the same. Anything unusual falls back to `json` itself: a document the fast
path does not accept is handed to `json.loads`, which then returns the same value or
raises its usual `json.JSONDecodeError` (a ValueError); an interpreter without `_json`,
or one whose `_json` takes other arguments, uses `json` for everything.
"""
from __future__ import annotations

_WS = " \t\n\r"          # JSON's whitespace, what json skips around a document


def _build():
    import _json

    class _Decoder:
        # The attributes json.JSONDecoder gives the C scanner, at their defaults.
        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"),
                          "NaN": float("nan")}.__getitem__

    scan = _json.make_scanner(_Decoder())  # type: ignore[arg-type]

    def encoder(sort_keys, separators, ensure_ascii, default):
        item_sep, key_sep = separators
        return _json.make_encoder({}, default, _json.encode_basestring_ascii if ensure_ascii
                                  else _json.encode_basestring, None, key_sep, item_sep,
                                  sort_keys, False, True)

    # Prove the accelerator takes these arguments and answers as json would.
    if scan('{"a": [1, 2.5, "\\u00e9", null, true]}', 0) != ({"a": [1, 2.5, "é", None, True]}, 37):
        raise ImportError("unexpected _json scanner")
    if "".join(encoder(True, (",", ":"), True, None)({"b": 1, "a": ["é", 1.5]}, 0)) != \
            '{"a":["\\u00e9",1.5],"b":1}':
        raise ImportError("unexpected _json encoder")
    return scan, encoder


try:
    _scan, _encoder = _build()
except (ImportError, AttributeError, TypeError):
    _scan = _encoder = None


def loads(data):
    """json.loads for str or UTF-8 bytes."""
    if _scan is not None:
        try:
            # As json.loads decodes UTF-8 (other encodings and a BOM fall back to it).
            text = data.decode("utf-8", "surrogatepass") if isinstance(data, (bytes, bytearray)) else data
            start = len(text) - len(text.lstrip(_WS))
            value, end = _scan(text, start)
            if end == len(text.rstrip(_WS)):
                return value
        except (StopIteration, ValueError, AttributeError):
            pass     # json says what is wrong, in its own words
    import json
    return json.loads(data)


def _not_serializable(o):
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


def dumps(obj, *, sort_keys: bool = False, separators: tuple[str, str] = (", ", ": "),
          ensure_ascii: bool = True, default=None) -> str:
    """json.dumps with these options (no indent)."""
    if _encoder is None:
        import json
        return json.dumps(obj, sort_keys=sort_keys, separators=separators,
                          ensure_ascii=ensure_ascii, default=default)
    return "".join(_encoder(sort_keys, separators, ensure_ascii, default or _not_serializable)(obj, 0))

