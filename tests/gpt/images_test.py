#!/usr/bin/env python3
"""Checks the GPT kernels' GPU images against the contract's kernel list, without a GPU.

  images_test.py --list kernel_list.txt [--fatbin F] [--ptx P [--ptxas X --sm N]] [--spirv S]
                 [--host H]

kernel_list.txt (examples/trainer/gpt/kernels/) names every entry point and its parameter types.
Each image given must hold exactly those entry points, and each entry point exactly those
parameters:
  fatbin  every SASS (ELF) image in it, one per architecture: the global functions of its symbol
          table, and the parameter sizes of each kernel's .nv.info section (EIATTR_KPARAM_INFO);
          the PTX inside a fatbin is compressed and is left to --ptx.
  ptx     the .entry declarations: parameter count, sizes and kind (.f32 for float, an integer
          of the type's size else: pointers are .u64). With --ptxas, the PTX is also assembled
          for sm_N, as the driver's JIT would, and the result checked as a fatbin's SASS.
  spirv   the OpEntryPoint names and their OpFunction's type: pointer, 64- or 32-bit integer,
          32-bit float per parameter.
  host    the host image (a shared object): the table tessera_host_module_v1 returns, its
          kernel names and argument sizes (loaded with ctypes: the image's constructors run).
Exits non-zero naming every difference. Parses the files itself (no cuobjdump or spirv-dis
needed), so it runs wherever the images were built.
"""
import argparse
import ctypes
import os
import re
import struct
import subprocess
import sys
import tempfile

SIZES = {"ptr": 8, "u64": 8, "i64": 8, "u32": 4, "i32": 4, "f32": 4}
# What a SPIR-V parameter of each contract type is (OpenCL integers carry no sign).
SPIRV_KINDS = {"ptr": "ptr", "u64": "int64", "i64": "int64", "u32": "int32", "i32": "int32",
               "f32": "float32"}


def read_kernel_list(path):
    kernels = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            unknown = [w for w in words[1:] if w not in SIZES]
            if unknown or words[0] in kernels:
                sys.exit(f"{path}:{number}: bad line (unknown types {unknown} or repeated name)")
            kernels[words[0]] = words[1:]
    return kernels


def compare(where, expected, found, describe):
    """found: name -> list of per-parameter values; describe(types) -> the expected values."""
    errors = []
    for name in sorted(set(expected) - set(found)):
        errors.append(f"{where}: missing kernel {name}")
    for name in sorted(set(found) - set(expected)):
        errors.append(f"{where}: kernel {name} is not in the kernel list")
    for name in sorted(set(expected) & set(found)):
        want = describe(expected[name])
        if found[name] != want:
            errors.append(f"{where}: {name}: parameters {found[name]}, the contract says {want}")
    return errors


# ---- PTX ---------------------------------------------------------------------------------------

def ptx_entries(text):
    entries = {}
    for match in re.finditer(r"\.entry\s+(\w+)\s*\((.*?)\)", text, re.S):
        params = re.findall(r"\.param\s+\.([usbf])(\d+)", match.group(2))
        entries[match.group(1)] = [("f" if kind == "f" else "int") + bits for kind, bits in params]
    return entries


def ptx_describe(types):
    return ["f32" if t == "f32" else f"int{SIZES[t] * 8}" for t in types]


# ---- fatbin (container of ELF cubins) ----------------------------------------------------------

FATBIN_MAGIC = 0xBA55ED50
EIATTR_KPARAM_INFO = 0x17


def fatbin_elves(data, path):
    """Yields (sm, elf bytes) for each SASS image of a fatbin (kind 2 entries)."""
    magic, _version, header_size, body_size = struct.unpack_from("<IHHQ", data, 0)
    if magic != FATBIN_MAGIC:
        sys.exit(f"{path}: not a fatbin (magic {magic:#x})")
    offset, end = header_size, header_size + body_size
    while offset < end:
        kind, _v, entry_header, payload = struct.unpack_from("<HHIQ", data, offset)
        sm = struct.unpack_from("<I", data, offset + 28)[0]
        start = offset + entry_header
        if kind == 2:
            yield sm, data[start:start + payload]
        offset = start + payload


def elf_sections(elf):
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx]

    def name_at(table, index):
        start = table[4] + index
        return elf[start:elf.index(b"\0", start)].decode()

    return [(name_at(names, h[0]), h) for h in headers], name_at


def cubin_kernels(elf):
    """name -> parameter sizes in order, for every global function of a cubin."""
    sections, name_at = elf_sections(elf)
    functions = []
    for _name, h in sections:
        if h[1] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[h[6]][1]
        for i in range(h[5] // 24):
            st_name, st_info, _other, _shndx, _value, _size = struct.unpack_from(
                "<IBBHQQ", elf, h[4] + i * 24)
            if st_info >> 4 == 1 and st_info & 0xF == 2:  # STB_GLOBAL, STT_FUNC
                functions.append(name_at(strtab, st_name))
    info = {name[len(".nv.info."):]: h for name, h in sections if name.startswith(".nv.info.")}
    kernels = {}
    for function in functions:
        params = {}
        h = info.get(function)
        at, end = (h[4], h[4] + h[5]) if h else (0, 0)
        while at < end:  # attributes: format byte, attribute byte, then by format
            fmt, attr = elf[at], elf[at + 1]
            if fmt == 4:  # EIFMT_SVAL: u16 size, payload
                size, = struct.unpack_from("<H", elf, at + 2)
                if attr == EIATTR_KPARAM_INFO:
                    _index, ordinal, _offset, flags = struct.unpack_from("<IHHI", elf, at + 4)
                    params[ordinal] = (flags >> 18) & 0x3FFF
                at += 4 + size
            elif fmt == 3:  # EIFMT_HVAL: u16 value
                at += 4
            elif fmt == 2:  # EIFMT_BVAL: u8 value
                at += 3
            else:  # EIFMT_NVAL: none
                at += 2
        kernels[function] = [params[i] for i in sorted(params)]
    return kernels


# ---- SPIR-V ------------------------------------------------------------------------------------

def spirv_entries(data, path):
    words = struct.unpack(f"<{len(data) // 4}I", data[:len(data) // 4 * 4])
    if not words or words[0] != 0x07230203:
        sys.exit(f"{path}: not SPIR-V (little-endian magic missing)")
    types, function_types, functions, entries = {}, {}, {}, {}
    at = 5
    while at < len(words):
        count, opcode = words[at] >> 16, words[at] & 0xFFFF
        op = words[at + 1:at + count]
        if opcode == 15:  # OpEntryPoint: model, function, name...
            raw = struct.pack(f"<{len(op) - 2}I", *op[2:])
            entries[raw.split(b"\0", 1)[0].decode()] = op[1]
        elif opcode == 21:  # OpTypeInt: result, width, signedness
            types[op[0]] = f"int{op[1]}"
        elif opcode == 22:  # OpTypeFloat: result, width
            types[op[0]] = f"float{op[1]}"
        elif opcode == 32:  # OpTypePointer: result, storage class, type
            types[op[0]] = "ptr"
        elif opcode == 33:  # OpTypeFunction: result, return type, parameter types...
            function_types[op[0]] = op[2:]
        elif opcode == 54:  # OpFunction: result type, result, control, function type
            functions[op[1]] = op[3]
        at += max(count, 1)
    return {name: [types.get(t, "?") for t in function_types[functions[fn]]]
            for name, fn in entries.items()}


def spirv_describe(types):
    return [SPIRV_KINDS[t] for t in types]


# ---- host ELF (tessera_host_module_v1, backend_abi.h) -------------------------------------------

class HostKernelDesc(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("fn", ctypes.c_void_p), ("arg_count", ctypes.c_size_t),
                ("arg_sizes", ctypes.POINTER(ctypes.c_size_t))]


class HostModule(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("abi_major", ctypes.c_uint32),
                ("kernel_count", ctypes.c_size_t), ("kernels", ctypes.POINTER(HostKernelDesc))]


def host_kernels(path):
    entry = ctypes.CDLL(path).tessera_host_module_v1
    entry.restype = ctypes.POINTER(HostModule)
    module = entry().contents
    kernels = {}
    for i in range(module.kernel_count):
        desc = module.kernels[i]
        kernels[desc.name.decode()] = [desc.arg_sizes[a] for a in range(desc.arg_count)]
    return kernels


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--list", required=True)
    parser.add_argument("--fatbin")
    parser.add_argument("--ptx")
    parser.add_argument("--ptxas")
    parser.add_argument("--sm")
    parser.add_argument("--spirv")
    parser.add_argument("--host")
    args = parser.parse_args()
    expected = read_kernel_list(args.list)
    errors, checked = [], []

    def read(path):
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as error:
            sys.exit(f"{path}: cannot read the image ({error.strerror}); build tessera_gpt_kernels")

    if args.fatbin:
        data = read(args.fatbin)
        elves = list(fatbin_elves(data, args.fatbin))
        if not elves:
            errors.append(f"{args.fatbin}: no SASS image in the fatbin")
        for sm, elf in elves:
            errors += compare(f"{args.fatbin} (sm_{sm})", expected, cubin_kernels(elf),
                              lambda types: [SIZES[t] for t in types])
            checked.append(f"fatbin sm_{sm}")
    if args.ptx:
        errors += compare(args.ptx, expected, ptx_entries(read(args.ptx).decode()), ptx_describe)
        checked.append("ptx")
        if args.ptxas:
            with tempfile.TemporaryDirectory() as scratch:
                cubin = os.path.join(scratch, "jit.cubin")
                run = subprocess.run([args.ptxas, f"-arch=sm_{args.sm}", args.ptx, "-o", cubin],
                                     capture_output=True, text=True)
                if run.returncode != 0:
                    errors.append(f"{args.ptx}: ptxas -arch=sm_{args.sm} failed: {run.stderr}")
                else:
                    errors += compare(f"{args.ptx} assembled for sm_{args.sm}", expected,
                                      cubin_kernels(read(cubin)),
                                      lambda types: [SIZES[t] for t in types])
                    checked.append(f"ptx assembled for sm_{args.sm}")
    if args.spirv:
        errors += compare(args.spirv, expected, spirv_entries(read(args.spirv), args.spirv),
                          spirv_describe)
        checked.append("spirv")
    if args.host:
        read(args.host)  # a clear message when it is missing
        errors += compare(args.host, expected, host_kernels(args.host),
                          lambda types: [SIZES[t] for t in types])
        checked.append("host")
    if not checked:
        sys.exit("no image given (--fatbin, --ptx, --spirv, --host)")
    for error in errors:
        print(error, file=sys.stderr)
    print(f"{len(expected)} kernels checked in: {', '.join(checked)}: "
          f"{'FAILED' if errors else 'all match the contract'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
