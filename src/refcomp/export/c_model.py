"""The C of an export: `<name>.h` (the documented API and its size macros), `<name>.c` (every
kernel, the graph function and the API functions) and the weights (`<name>_weights.c` with
const arrays, or `<name>_weights.bin`, a blob the caller loads).  Layout and API: spec/export.md.
"""
from __future__ import annotations

import math
import re

import numpy as np

from ..emit_c import c_string, comment_safe, mangle
from ..errors import BuildError, InternalError
from .plan import ExportPlan

C_TYPES = {"float32": "float", "float64": "double", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
           "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
           "uint64": "uint64_t", "bool": "uint8_t", "float16": "uint16_t", "bfloat16": "uint16_t"}
BLOB_ALIGN = 64
ARENA_ALIGN_C = 8  # what the caller's arena and blob pointers must be aligned to (the widest element)
ERRORS = (("OK", 0, "success"),
          ("ERROR_SHAPE", 1, "an input's shape does not match the model (a static dim, a dim shared by two "
                             "inputs, a runtime shape check), or a dim is negative"),
          ("ERROR_KERNEL", 2, "a kernel failed (its own check; see the message)"),
          ("ERROR_BOUND", 3, "a symbolic dim is above its declared upper bound"),
          ("ERROR_ARENA", 4, "the arena is smaller than <NAME>_ARENA_BYTES"),
          ("ERROR_ARGUMENT", 5, "a NULL or misaligned pointer"))


def c_type(dtype: str) -> str:
    try:
        return C_TYPES[dtype]
    except KeyError:
        raise BuildError(f"export_c: tensors of dtype {dtype} cannot be exported (supported: "
                         f"{', '.join(sorted(C_TYPES))})") from None


def _macro_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", text).upper()


def _storage_view(array: np.ndarray) -> np.ndarray:
    if array.dtype == np.float16:
        return array.view(np.uint16)
    if array.dtype == np.bool_:
        return array.astype(np.uint8)
    return array


def c_values(array: np.ndarray) -> str:
    """The elements of array as a C initializer list (exact: floats round-trip)."""
    flat = _storage_view(np.ascontiguousarray(array)).reshape(-1)
    if flat.size == 0:
        return "0"
    if flat.dtype.kind == "f":
        suffix = "f" if flat.dtype == np.float32 else ""
        out = []
        for v in flat.tolist():
            if math.isnan(v):
                out.append("NAN")
            elif math.isinf(v):
                out.append("INFINITY" if v > 0 else "-INFINITY")
            else:
                out.append(repr(v) + suffix)
    elif flat.dtype == np.int64:
        out = [f"INT64_C({v})" if v != -2 ** 63 else "INT64_MIN" for v in flat.tolist()]
    elif flat.dtype == np.uint64:
        out = [f"UINT64_C({v})" for v in flat.tolist()]
    elif flat.dtype == np.int32:
        out = [str(v) if v != -2 ** 31 else "INT32_MIN" for v in flat.tolist()]
    elif flat.dtype == np.uint32:
        out = [f"{v}u" for v in flat.tolist()]
    else:
        out = [str(v) for v in flat.tolist()]
    lines = [", ".join(out[i:i + 16]) for i in range(0, len(out), 16)]
    return ",\n    ".join(lines)


def dim_text(dim) -> str:
    """A shape dim as text for comments (batch * 2, 16)."""
    from ..runtime.vm import _show

    return comment_safe(_show(dim))


class CModelWriter:
    def __init__(self, plan: ExportPlan, name: str, weights: str) -> None:
        self.plan = plan
        self.name = name
        self.NAME = name.upper()
        self.weights = weights
        for spec in (*plan.inputs, *plan.outputs):
            c_type(spec.dtype)
        for array in plan.constants:
            c_type(str(array.dtype))
        self.blob_offsets = []
        offset = 0
        for array in plan.constants:
            offset = (offset + BLOB_ALIGN - 1) // BLOB_ALIGN * BLOB_ALIGN
            self.blob_offsets.append(offset)
            offset += array.nbytes
        self.blob_bytes = offset

    # ------------------------------------------------------------------ header
    def header(self) -> str:
        p, N, n = self.plan, self.NAME, self.name
        guard = f"{N}_H"
        blob = self.weights == "blob"
        lines = [f"/* {n}.h: a model exported by refcomp as standalone C99 (no malloc, no OpenMP unless asked).",
                 " *",
                 " * One call runs the whole model:",
                 " *",
                 f" *   int32_t code = {n}_run({'weights, ' if blob else ''}input_shapes, inputs, outputs, "
                 "output_shapes, arena, arena_bytes);",
                 " *",
                 f" * input_shapes  every input's dims, inputs in order (int64_t; see {N}_INPUT_<i>_RANK)",
                 f" * inputs        one pointer per input, C-contiguous, of type {n}_input_<i>_t",
                 f" * outputs       one pointer per output, room for {N}_OUTPUT_<j>_MAX_ELEMS elements",
                 " * output_shapes written: every output's dims, outputs in order",
                 f" * arena         caller-owned working memory: at least {N}_ARENA_BYTES bytes, aligned to",
                 f" *               {N}_ARENA_ALIGN; intermediates and kernel scratch live there, nothing else",
                 " *               is written besides the outputs and output_shapes",
                 *([" * weights       the blob file <name>_weights.bin loaded into caller memory",
                    f" *               ({N}_WEIGHTS_BYTES bytes, aligned to {N}_ARENA_ALIGN, little-endian)"]
                   if blob else []),
                 " *",
                 f" * Returns {N}_OK (0) or an error code below; {n}_message() gives the text of the last error.",
                 " * Every dim is checked before anything runs: a dim above its declared bound or a wrong",
                 " * shape returns an error and writes nothing but output_shapes. Not reentrant: one call",
                 " * at a time (kernel scratch is handed out from the arena through static state).",
                 " */",
                 f"#ifndef {guard}", f"#define {guard}", "", "#include <stddef.h>", "#include <stdint.h>", "",
                 "/* error codes */"]
        for label, code, text in ERRORS:
            lines.append(f"#define {N}_{label} {code}  /* {comment_safe(text.replace('<NAME>', N))} */")
        lines += ["", "/* memory, in bytes */",
                  f"#define {N}_ARENA_BYTES {p.arena_bytes}  /* graph intermediates + kernel scratch, at the bounds */",
                  f"#define {N}_ARENA_GRAPH_BYTES {p.graph_arena_bytes}  /* intermediates (planned at the bounds) */",
                  f"#define {N}_ARENA_SCRATCH_BYTES {p.scratch_bytes}  /* the largest kernel scratch of one call */",
                  f"#define {N}_ARENA_ALIGN {ARENA_ALIGN_C}",
                  f"#define {N}_WEIGHT_BYTES {p.weight_bytes}  /* the weights' data */",
                  f"#define {N}_STACK_BYTES {max((k.stack_bytes for k in p.kernels), default=0)}  "
                  "/* the largest stack array of a kernel */"]
        if blob:
            lines += [f"#define {N}_WEIGHTS_BYTES {self.blob_bytes}  /* the blob file (weights at 64-byte offsets) */",
                      f"#define {N}_WEIGHTS_FILE {c_string(self.name + '_weights.bin')}",
                      f"#define {N}_WEIGHTS_BLOB 1"]
        lines += ["", "/* symbolic dims: their upper bounds */"]
        taken: set[str] = set()
        for var, bound in p.size_vars:
            macro = _macro_name(var)
            while macro in taken:  # two names that differ only in case or punctuation
                macro += "_"
            taken.add(macro)
            lines.append(f"#define {N}_DIM_MAX_{macro} {bound}  /* {comment_safe(var)} */")
        lines += ["", f"#define {N}_NUM_INPUTS {len(p.inputs)}", f"#define {N}_NUM_OUTPUTS {len(p.outputs)}"]
        for kind, specs in (("INPUT", p.inputs), ("OUTPUT", p.outputs)):
            for i, spec in enumerate(specs):
                shape = ", ".join(dim_text(d) for d in spec.dims)
                lines += ["", f"/* {kind.lower()} {i}: {comment_safe(spec.name)}, {spec.dtype}, shape ({shape}) */",
                          f"#define {N}_{kind}_{i}_NAME {c_string(spec.name)}",
                          f"#define {N}_{kind}_{i}_DTYPE {c_string(spec.dtype)}",
                          f"typedef {c_type(spec.dtype)} {n}_{kind.lower()}_{i}_t;",
                          f"#define {N}_{kind}_{i}_RANK {len(spec.dims)}",
                          f"#define {N}_{kind}_{i}_MAX_SHAPE {{{', '.join(str(d) for d in spec.max_dims) or '0'}}}",
                          f"#define {N}_{kind}_{i}_MAX_ELEMS {spec.max_elems}"]
        weights = "const void* weights, " if blob else ""
        lines += ["",
                  f"int32_t {n}_run({weights}const int64_t* input_shapes, const void* const* inputs, "
                  "void* const* outputs,",
                  "    int64_t* output_shapes, void* arena, size_t arena_bytes);",
                  "/* The text of the last error (static storage; empty after a successful call). */",
                  f"const char* {n}_message(void);", "", f"#endif  /* {guard} */", ""]
        return "\n".join(lines)

    # ------------------------------------------------------------------ model.c
    def source(self) -> str:
        p, N, n = self.plan, self.NAME, self.name
        preludes, bodies = set(), []
        for k in p.kernels:
            marker = f"/* {comment_safe(k.name)}:"
            at = k.source.find(marker)
            if at < 0:
                raise InternalError(f"export_c: kernel {k.name}: its C has no start marker")
            head = k.source[:at].split("\n", 1)[1] if k.source.startswith("/* Generated") else k.source[:at]
            preludes.add(head)
            body = k.source[at:]
            body = re.sub(r"\bmalloc\(", "rcx_scratch_alloc(", body)
            body = re.sub(r"\bfree\(", "rcx_scratch_free(", body)
            body = body.replace(f"\nint32_t {k.symbol}(", f"\nstatic int32_t {k.symbol}(")
            body = body.replace(f"\nconst char* {k.message_symbol}(", f"\nstatic const char* {k.message_symbol}(")
            if body.startswith(f"{marker}") and f"int32_t {k.symbol}(" not in body:
                raise InternalError(f"export_c: kernel {k.name}: entry point not found")
            bodies.append(body)
        if len(preludes) > 1:
            raise InternalError("export_c: the kernels' C preludes differ; they cannot share one file")
        graph = p.graph.source
        symbol = p.graph.symbol
        graph = graph.replace(f"\nconst char* {symbol}_message(void)", f"\nstatic const char* {symbol}_message(void)")
        graph = graph.replace(f"\nint32_t {symbol}(", f"\nstatic int32_t {symbol}(")
        # a model without intermediates or inputs leaves some parameters unused (-Wextra)
        graph = graph.replace("(void)code;", "(void)code; (void)arena; (void)shapes; (void)out_shapes;", 1)
        blob = self.weights == "blob"
        lines = [f"/* {n}.c: generated by refcomp (export_c); the API is {n}.h, the format spec/export.md. */",
                 f'#include "{n}.h"', ""]
        lines += [preludes.pop() if preludes else "#include <stdint.h>\n#include <stddef.h>\n",
                  "/* Kernel scratch: a stack of blocks in the scratch part of the arena (kernels free in",
                  "   reverse order of allocation; a request that does not fit returns NULL, which the kernel",
                  "   reports as its out-of-memory error). */",
                  "static unsigned char* rcx_scratch;",
                  "static size_t rcx_scratch_size, rcx_scratch_top;",
                  "static inline void* rcx_scratch_alloc(size_t bytes) {",
                  "    size_t need = (bytes + 63u) / 64u * 64u;",
                  "    void* block;",
                  "    if (need < bytes || need > rcx_scratch_size - rcx_scratch_top) return NULL;",
                  "    block = rcx_scratch + rcx_scratch_top;",
                  "    rcx_scratch_top += need;",
                  "    return block;",
                  "}",
                  "static inline void rcx_scratch_free(void* block) {",
                  "    if (block != NULL) rcx_scratch_top = (size_t)((unsigned char*)block - rcx_scratch);",
                  "}", ""]
        lines += bodies
        lines += ["/* ---- the graph function (spec/graph_c.md) ---- */", graph]
        # weights
        consts = []
        if p.constants:
            if blob:
                lines.append(f"static const size_t rcx_weight_offsets[{len(p.constants)}] = "
                             f"{{{', '.join(str(o) for o in self.blob_offsets)}}};")
            else:
                for i, array in enumerate(p.constants):
                    lines.append(f"extern const {c_type(str(array.dtype))} {n}_weight_{i}[{max(array.size, 1)}];")
                    consts.append(f"(void*){n}_weight_{i}")
                lines.append(f"static void* const rcx_consts[{len(consts)}] = {{{', '.join(consts)}}};")
        fns = []
        for k in p.kernels:
            fns += [f"(rcg_fn){k.symbol}", f"(rcg_fn){k.message_symbol}"]
        lines.append(f"static const rcg_fn rcx_fns[{max(len(fns), 1)}] = {{{', '.join(fns) or '0'}}};")
        # per input dim: its upper bound and whether it is a bare size var
        maxima, bare = [], []
        seen = set()
        for spec in p.inputs:
            for dim, top in zip(spec.dims, spec.max_dims):
                maxima.append(str(top))
                is_var = type(dim).__name__ in ("Var", "SizeVar") and dim.name not in seen
                if is_var:
                    seen.add(dim.name)
                bare.append("1" if is_var else "0")
        rank = len(maxima)
        out_rank = sum(len(s.dims) for s in p.outputs)
        weights = "const void* weights, " if blob else ""
        lines += [
            f"static const int64_t rcx_max_dims[{max(rank, 1)}] = {{{', '.join(maxima) or '0'}}};",
            f"static const unsigned char rcx_dim_is_var[{max(rank, 1)}] = {{{', '.join(bare) or '0'}}};",
            "static char rcx_message[256];",
            "static const char* rcx_last = \"\";",
            "",
            f"const char* {n}_message(void) {{ return rcx_last; }}",
            "",
            f"int32_t {n}_run({weights}const int64_t* input_shapes, const void* const* inputs, void* const* outputs,",
            "    int64_t* output_shapes, void* arena, size_t arena_bytes) {",
            f"    void* ins[{max(len(p.inputs), 1)}];",
            "    int64_t need = 0;",
            "    int32_t code;",
            "    int i;",
            *([f"    void* consts[{len(p.constants)}];"] if blob and p.constants else []),
            "    rcx_last = rcx_message;",
            f"    if ((input_shapes == NULL && {rank} > 0) || (inputs == NULL && {len(p.inputs)} > 0) || outputs == NULL"
            f" || (output_shapes == NULL && {out_rank} > 0) || arena == NULL"
            f"{' || weights == NULL' if blob else ''}) {{",
            "        snprintf(rcx_message, sizeof rcx_message, \"a NULL pointer argument\");",
            f"        return {N}_ERROR_ARGUMENT;",
            "    }",
            f"    if ((uintptr_t)arena % {N}_ARENA_ALIGN != 0"
            f"{f' || (uintptr_t)weights % {N}_ARENA_ALIGN != 0' if blob else ''}) {{",
            f"        snprintf(rcx_message, sizeof rcx_message, \"the arena{' or the weights' if blob else ''} "
            f"must be aligned to %d bytes\", {N}_ARENA_ALIGN);",
            f"        return {N}_ERROR_ARGUMENT;",
            "    }",
            f"    for (i = 0; i < {rank}; ++i) {{",
            "        if (input_shapes[i] < 0) {",
            "            snprintf(rcx_message, sizeof rcx_message, \"dim %d of the input shapes is negative (%lld)\", i, "
            "(long long)input_shapes[i]);",
            f"            return {N}_ERROR_SHAPE;",
            "        }",
            "        if (input_shapes[i] > rcx_max_dims[i]) {",
            "            snprintf(rcx_message, sizeof rcx_message, \"dim %d of the input shapes is %lld, above %s %lld\", i,",
            "                     (long long)input_shapes[i], rcx_dim_is_var[i] ? \"its declared bound\" : \"the model's\","
            " (long long)rcx_max_dims[i]);",
            f"            return rcx_dim_is_var[i] ? {N}_ERROR_BOUND : {N}_ERROR_SHAPE;",
            "        }",
            "    }",
            f"    if (arena_bytes < (size_t){N}_ARENA_BYTES) {{",
            "        snprintf(rcx_message, sizeof rcx_message, \"the arena has %lu bytes, the model needs %lu\", "
            f"(unsigned long)arena_bytes, (unsigned long){N}_ARENA_BYTES);",
            f"        return {N}_ERROR_ARENA;",
            "    }",
            f"    for (i = 0; i < {len(p.inputs)}; ++i) {{",
            "        if (inputs[i] == NULL) {",
            "            snprintf(rcx_message, sizeof rcx_message, \"input %d is NULL\", i);",
            f"            return {N}_ERROR_ARGUMENT;",
            "        }",
            "        ins[i] = (void*)inputs[i];",
            "    }",
            *([f"    for (i = 0; i < {len(p.constants)}; ++i) consts[i] = (void*)((const unsigned char*)weights + "
               "rcx_weight_offsets[i]);"] if blob and p.constants else []),
            f"    rcx_scratch = (unsigned char*)arena + {N}_ARENA_GRAPH_BYTES;",
            f"    rcx_scratch_size = {N}_ARENA_SCRATCH_BYTES;",
            "    rcx_scratch_top = 0;",
            f"    code = {symbol}(input_shapes, ins, {'consts' if blob and p.constants else ('rcx_consts' if p.constants else 'NULL')}, "
            f"rcx_fns, outputs, output_shapes, (uint8_t*)arena, {N}_ARENA_GRAPH_BYTES, &need, 0);",
            "    if (code != 0) {",
            f"        rcx_last = {symbol}_message();",
            "        return code;",
            "    }",
            "    rcx_message[0] = 0;",
            f"    return {N}_OK;",
            "}", ""]
        text = "\n".join(lines)
        for word in ("malloc", "calloc", "realloc", "aligned_alloc"):
            if re.search(rf"\b{word}\s*\(", text):
                raise InternalError(f"export_c: the exported C still calls {word}")
        if "#include <stdio.h>" not in text:
            text = text.replace(f'#include "{n}.h"', f'#include "{n}.h"\n#include <stdio.h>', 1)
        return text

    def weights_source(self) -> str:
        n = self.name
        lines = [f"/* {n}_weights.c: the weights of {n} as const data (generated by refcomp). */",
                 "#include <stdint.h>", "#include <math.h>", ""]
        for i, array in enumerate(self.plan.constants):
            lines.append(f"/* shape {tuple(array.shape)}, {array.dtype} */")
            lines.append(f"extern const {c_type(str(array.dtype))} {n}_weight_{i}[{max(array.size, 1)}];")
            lines.append(f"const {c_type(str(array.dtype))} {n}_weight_{i}[{max(array.size, 1)}] = {{\n    "
                         f"{c_values(array)}\n}};")
        if not self.plan.constants:
            lines.append(f"typedef int {n}_no_weights;  /* an empty translation unit is not ISO C */")
        return "\n".join(lines) + "\n"

    def weights_blob(self) -> bytes:
        out = bytearray(self.blob_bytes)
        for offset, array in zip(self.blob_offsets, self.plan.constants):
            data = _storage_view(np.ascontiguousarray(array)).astype(
                _storage_view(np.ascontiguousarray(array)).dtype.newbyteorder("<")).tobytes()
            out[offset:offset + len(data)] = data
        return bytes(out)


def check_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,30}", name or "") or name != mangle(name):
        raise BuildError(f"export_c: name must be a C identifier of letters, digits and _, starting with a letter "
                         f"(it prefixes the API and the file names), got {name!r}")
    return name
