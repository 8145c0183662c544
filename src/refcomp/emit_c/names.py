"""C identifiers for IR names: mangled to [A-Za-z0-9_], unique, and the same on every run."""
from __future__ import annotations

import re

# Words a mangled name must never equal: C keywords, common macros and the names of the
# standard library functions the emitted source calls.
_RESERVED = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline
int long register restrict return short signed sizeof static struct switch typedef union unsigned
void volatile while _Bool _Complex _Imaginary bool true false NULL main errno assert
memcpy memset memmove memcmp malloc free calloc realloc aligned_alloc abort exit atexit qsort
bsearch abs labs llabs div ldiv rand srand atoi atol atof strtol strtod getenv system strlen strcpy
strncpy strcmp strncmp strcat strchr strstr offsetof
""".split())

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
_MATH = frozenset("""
exp exp2 expm1 log log2 log10 log1p sqrt cbrt sin cos tan asin acos atan atan2 sinh cosh tanh asinh
acosh atanh erf erfc floor ceil round trunc nearbyint rint pow fmod hypot copysign fabs fmax fmin
fma ldexp frexp modf lround llround lrint llrint remainder isnan isinf isfinite signbit fpclassify
isgreater isless nan
""".split())


def _taken_by_c(text: str) -> bool:
    """Whether an identifier could clash with C: keywords, macros and names of the headers the
    source includes, libm and libc functions (with their f/l variants), *_t types, and the
    prefixes reserved by C, OpenMP and refcomp itself."""
    if text in _RESERVED or text.startswith(("rc_", "_", "omp_", "__")) or text.endswith("_t"):
        return True
    if len(text) > 1 and text.isupper():
        return True  # macros (NAN, INT32_MAX, ...) are upper case; single letters are not
    base = text[:-1] if text[-1:] in ("f", "l") else text
    return text in _MATH or base in _MATH


def mangle(name: str, prefix: str = "") -> str:
    """A C identifier made from a user name: unsafe characters become `_XX` (hex), then prefixed.

    Names the emitter generates itself start with `rc_`, so user names never collide with them:
    a user name starting with `rc_` gets an extra `u_` in front.
    """
    text = _UNSAFE.sub(lambda m: "_%02x" % ord(m.group()), name)
    if not text:
        text = "_"
    if text[0].isdigit():
        text = "n" + text
    if _taken_by_c(text):
        text = "u_" + text
    return prefix + text


def symbol_suffix(name: str) -> str:
    """The part of an exported symbol after a fixed prefix: only [A-Za-z0-9_], never empty."""
    return _UNSAFE.sub(lambda m: "_%02x" % ord(m.group()), name) or "_"


def comment_safe(text: str) -> str:
    """Text that can sit inside a C block comment: no `*/`, no line breaks, printable ASCII only."""
    text = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in text)
    return text.replace("*/", "* /").replace("/*", "/ *")


def c_string(text: str) -> str:
    """A C string literal holding text exactly (non-ASCII as octal escapes of its UTF-8 bytes)."""
    out = []
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "?":
            out.append("\\?")  # no trigraphs
        elif 32 <= byte < 127:
            out.append(ch)
        else:
            out.append("\\%03o" % byte)
    return '"' + "".join(out) + '"'


class NameTable:
    """Gives each IR object (Var, Buffer) one C name, unique in the function: `i`, `i_1`, ..."""

    def __init__(self, taken: tuple[str, ...] = ()) -> None:
        self._names: dict[int, str] = {}
        self._keep: list[object] = []  # keeps ids alive so they are never reused
        self._used: set[str] = set(taken)

    def fresh(self, hint: str) -> str:
        """A new unique name for the emitter's own use; hint must already be a C identifier."""
        return self._unique(hint)

    def _unique(self, base: str) -> str:
        name, counter = base, 0
        while name in self._used:
            counter += 1
            name = f"{base}_{counter}"
        self._used.add(name)
        return name

    def reserve(self, name: str) -> None:
        self._used.add(name)

    def name_of(self, obj: object, hint: str) -> str:
        """The C name of obj, created from hint on first use."""
        key = id(obj)
        if key not in self._names:
            self._names[key] = self._unique(mangle(hint))
            self._keep.append(obj)
        return self._names[key]

    def has(self, obj: object) -> bool:
        return id(obj) in self._names
