"""``elmscale fit ALGORITHM --help``: the algorithm's parameters with their defaults and the
first sentence of their description, read from the estimator's signature and its numpydoc
docstring (so the listing cannot drift from the Python API)."""

import inspect
import re
import textwrap

#: Width of the listing (the parameters' names and defaults, then their description).
WIDTH = 100


def parameter_docs(cls):
    """``[(name, default, summary), ...]`` of the estimator class ``cls``, in the order of
    its ``__init__`` signature; ``summary`` is the first sentence of the parameter's entry
    in the docstring's Parameters section, else its type, else ``""``."""
    entries = _parameters_section(inspect.getdoc(cls) or "")
    out = []
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = "(required)" if param.default is param.empty else repr(param.default)
        kind, text = entries.get(name, ("", ""))
        kind = re.sub(r",?\s*default\s*[=:].*$", "", kind)
        out.append((name, default, _first_sentence(text) or kind))
    return out


def _parameters_section(doc):
    """``{name: (type, description)}`` from a numpydoc docstring's Parameters section."""
    match = re.search(r"^Parameters\n-+\n(.*?)(?=^\S[^\n]*\n-+\n|\Z)", doc, re.M | re.S)
    if not match:
        return {}
    entries, name = {}, None
    for line in match.group(1).splitlines():
        if line and not line[0].isspace():
            head, _, kind = line.partition(" : ")
            for name in (n.strip() for n in head.split(",")):
                entries[name] = [kind.strip(), ""]
        elif name is not None and line.strip():
            entries[name][1] += " " + line.strip()
    # "a, b : int" gives both names the description that follows
    return {n: (kind, text.strip()) for n, (kind, text) in entries.items()}


def _first_sentence(text):
    text = text.replace("``", "")
    match = re.match(r"(.+?[.;:])(\s|$)", text)
    return (match.group(1) if match else text).rstrip(";:").strip()


def algorithm_help(name, cls):
    """The text closing ``elmscale fit NAME --help``."""
    rows = parameter_docs(cls)
    left = [f"  {param}={default}" for param, default, _ in rows]
    pad = min(max(map(len, left), default=0), 36) + 2
    lines = [f"parameters of {name} ({cls.__name__}), given as -p NAME=VALUE:"]
    for head, (_, _, summary) in zip(left, rows, strict=True):
        if not summary:
            lines.append(head)
            continue
        body = textwrap.wrap(summary, WIDTH - pad) or [""]
        if len(head) + 2 > pad:
            lines.append(head)
            lines += [" " * pad + b for b in body]
        else:
            lines.append(head.ljust(pad) + body[0])
            lines += [" " * pad + b for b in body[1:]]
    return "\n".join(lines)
