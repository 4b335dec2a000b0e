"""Options from a file: ``hvd-w2v COMMAND --config FILE``; the command line wins over the file.

Keys are the commands' long option names without the dashes (``min-count``; ``min_count`` is read the same),
and ``corpus`` for the corpus files. Two formats, by the file's extension:

- TOML (``.toml``, and any other extension): top-level keys are shared by the commands; a table named after
  a command (``[train]``, ``[evaluate]``) applies to that command only and wins over the top level. Values are
  typed: ``dim = 100``, ``cbow = true``, ``format = ["binary"]``, ``out = "runs/a"``.
- INI (``.ini``, ``.cfg``, ``.conf``): section ``[hvd-w2v]`` shared, ``[train]`` etc. for one command. Values
  are text: ``cbow = true`` (or yes/no, on/off, 1/0), lists separated by spaces (``format = text binary``);
  an empty value is the empty string.

A shared key is used by the commands that have that option and skipped by the others (one file serves train,
export and evaluate); a key that no command has, a key in a command's table that this command lacks, and a
table that names no command are errors (a misspelt key would otherwise be silently ignored). Values are
converted and checked as the command line's are (type, choices); the command's own checks (ranges) then apply
to both alike.
"""
import argparse
import configparser
import difflib

from .common.errors import UserError

INI_SUFFIXES = (".ini", ".cfg", ".conf")
COMMON_SECTION = "hvd-w2v"  # INI: the section for every command
POSITIONALS = ("corpus",)  # positional arguments a file may give (they are lists with a default)
_BOOLEANS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def read(path, commands):
    """``(common, tables)``: the ``{key: value}`` of ``path``'s top level (TOML) or [hvd-w2v] section (INI), and
    ``{command: {key: value}}`` of its tables or sections. UserError for an unreadable or malformed file, or a
    table that names none of ``commands``."""
    try:
        if path.lower().endswith(INI_SUFFIXES):
            common, tables = _read_ini(path)
        else:
            common, tables = _read_toml(path)
    except OSError as e:
        raise UserError(f"cannot read config file {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"config file {path} is not UTF-8 text") from None
    for name in tables:
        if name not in commands:
            raise UserError(f"config file {path}: [{name}] names no command (tables and sections are for "
                            f"{', '.join(sorted(commands))})")
    return common, tables


def _known(key, known, path, what):
    """UserError unless ``key`` (dashes or underscores) is one of ``known``; ``what`` names whose keys they are."""
    name = key.replace("_", "-")
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UserError(f"config file {path}: unknown key {key!r} for {what}{hint}; the keys are long options "
                        f"without the dashes: {', '.join(sorted(known))}")


def _read_toml(path):
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        raise UserError(f"config file {path}: TOML needs Python 3.11 or newer; use an INI file (.ini)") from None
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise UserError(f"config file {path} is not valid TOML: {e}") from None
    common = {k: v for k, v in data.items() if not isinstance(v, dict)}
    return common, {k: v for k, v in data.items() if isinstance(v, dict)}


def _read_ini(path):
    # No section is configparser's DEFAULT (whose keys it would copy into every section): [hvd-w2v] is read as
    # a section like the others and merged under the command's own.
    parser = configparser.ConfigParser(interpolation=None, default_section="\0")
    parser.optionxform = str  # keys as written: they are matched against option names
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except configparser.Error as e:
        raise UserError(f"config file {path} is not a valid INI file: {' '.join(str(e).split())}") from None
    tables = {name: dict(parser[name]) for name in parser.sections()}
    return tables.pop(COMMON_SECTION, {}), tables


def options(subparser):
    """``{key: argparse action}`` of the keys a file may give a command: its long options without the dashes
    (but --help and --config) and its list-valued positionals in POSITIONALS."""
    keys = {}
    for action in subparser._actions:  # argparse keeps no public list of a parser's actions
        for option in action.option_strings:
            if option.startswith("--") and option not in ("--help", "--config"):
                keys[option[2:]] = action
        if not action.option_strings and action.dest in POSITIONALS:
            keys[action.dest] = action
    return keys


def apply(parsers, command, path):
    """Make the values ``path`` gives ``command`` the defaults of its argparse subparser ``parsers[command]``
    (``parsers``: every command's), so that the command line, parsed afterwards, wins.

    A shared key (top level, [hvd-w2v]) that ``command`` lacks is skipped when another command has it (one
    file serves train, export, evaluate), and an error when no command has it; a key in a command's table
    must be one of that command's options, whichever command reads the file. UserError, naming the file and
    the key, for those and for a value the option refuses.
    """
    keys = {name: options(p) for name, p in parsers.items()}
    anyone = {k for known in keys.values() for k in known}
    common, tables = read(path, parsers)
    for name, table in tables.items():  # every table is checked, whichever command reads the file
        for key in table:
            _known(key, keys[name], path, f"`hvd-w2v {name}`")
    for key in common:
        _known(key, anyone, path, "any command")
    mine, defaults = keys[command], {}
    for layer in (common, tables.get(command, {})):  # the command's own table wins over the shared keys
        set_here = {}
        for key, value in layer.items():
            action = mine.get(key.replace("_", "-"))
            if action is None:
                continue  # a shared key of another command's option (the keys were all checked above)
            if action.dest in set_here:  # min-count and min_count, or sg and cbow
                raise UserError(f"config file {path}: {set_here[action.dest]} and {key} both set the same option")
            set_here[action.dest] = key
            defaults[action.dest] = _convert(action, value, f"config file {path}: {key}")
    parsers[command].set_defaults(**defaults)


def _convert(action, value, where):
    """``value`` (from TOML, typed, or INI, text) as the command line would give the action's dest."""
    if action.nargs == 0:  # --flag: store_true / store_false
        flag = value if isinstance(value, bool) else _BOOLEANS.get(str(value).strip().lower())
        if flag is None:
            raise UserError(f"{where}: expected true or false, not {value!r}")
        return action.const if flag else not action.const
    if action.nargs in ("+", "*"):
        if isinstance(value, str):
            items = value.split()
        elif isinstance(value, list):
            items = value
        else:
            items = [value]
        if action.nargs == "+" and not items:
            raise UserError(f"{where}: expected at least one value")
        return [_one(action, x, where) for x in items]
    if isinstance(value, (list, dict)):
        raise UserError(f"{where}: expected one value, not {value!r}")
    return _one(action, value, where)


def _one(action, value, where):
    if isinstance(value, bool) or isinstance(value, (list, dict)):
        raise UserError(f"{where}: expected {_kind(action)}, not {value!r}")
    try:
        converted = action.type(str(value)) if action.type else str(value)
    except (ValueError, TypeError, argparse.ArgumentTypeError):
        raise UserError(f"{where}: expected {_kind(action)}, not {value!r}") from None
    if action.choices is not None and converted not in action.choices:
        raise UserError(f"{where}: {value!r} is not one of {', '.join(map(str, action.choices))}")
    return converted


def _kind(action):
    return {int: "a whole number", float: "a number"}.get(action.type, "a text value")

