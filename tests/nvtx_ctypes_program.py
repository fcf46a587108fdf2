"""A CPU-only program that marks five NVTX ranges ("step 0" .. "step 4", 20 ms of busy work each) without the nvtx
package: it loads the injection library nsys names in NVTX_INJECTION64_PATH and hands it the NVTX v3 export
tables, as the header-only NVTX v3 loader does (NVIDIA/NVTX c/include/nvtx3/nvtxDetail/nvtxInit.h and nvtxImpl.h).
Outside nsys the variable is unset and the program only works. It prints whether the ranges reached a tool."""

from __future__ import annotations

import ctypes
import os
import sys
import time

# nvtxTypes.h: NVTX_CB_MODULE_* ids and NVTX_CBID_*_SIZE of each module's function table
MODULE_SLOTS = {1: 16, 2: 9, 3: 15, 4: 7, 5: 17, 6: 7}  # CORE, CUDA, OPENCL, CUDART, CORE2, SYNC
CORE = 1
RANGE_PUSH_A, RANGE_POP = 9, 11                         # NVTX_CBID_CORE_RangePushA, NVTX_CBID_CORE_RangePop
ETID_CALLBACKS, ETID_VERSIONINFO = 1, 3
NVTX_VERSION = 3

GetModule = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                             ctypes.POINTER(ctypes.c_uint))
SetVersion = ctypes.CFUNCTYPE(None, ctypes.c_uint32)
GetTable = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)


class Callbacks(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("get_module_function_table", GetModule)]


class VersionInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("version", ctypes.c_uint32), ("reserved0", ctypes.c_uint32),
                ("set_injection_nvtx_version", SetVersion)]


_alive: list[object] = []  # the tables and callbacks the tool keeps pointers to


def attach():
    """(push, pop) bound to the tool's implementations, or None when no tool is there."""
    path = os.environ.get("NVTX_INJECTION64_PATH")
    if not path:
        return None
    slots = {m: (ctypes.c_void_p * n)() for m, n in MODULE_SLOTS.items()}
    tables = {}
    for m, n in MODULE_SLOTS.items():
        table = (ctypes.c_void_p * (n + 1))()  # entry i points at slot i; entry 0 and the last stay NULL
        for i in range(1, n):
            table[i] = ctypes.addressof(slots[m]) + i * ctypes.sizeof(ctypes.c_void_p)
        tables[m] = table

    def get_module(module, out_table, out_size):
        if module not in tables:
            return 0
        if out_size:
            out_size[0] = MODULE_SLOTS[module]
        if out_table:
            out_table[0] = ctypes.addressof(tables[module])
        return 1

    callbacks = Callbacks(ctypes.sizeof(Callbacks), GetModule(get_module))
    version = VersionInfo(ctypes.sizeof(VersionInfo), NVTX_VERSION, 0, SetVersion(lambda _v: None))
    exports = {ETID_CALLBACKS: ctypes.addressof(callbacks), ETID_VERSIONINFO: ctypes.addressof(version)}
    get_table = GetTable(lambda table_id: exports.get(table_id))
    _alive.extend([slots, tables, callbacks, version, get_table])
    try:
        tool = ctypes.CDLL(path)
        if not tool.InitializeInjectionNvtx2(get_table):
            return None
    except (OSError, AttributeError):
        return None
    core = slots[CORE]
    if not core[RANGE_PUSH_A] or not core[RANGE_POP]:
        return None
    return ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p)(core[RANGE_PUSH_A]), ctypes.CFUNCTYPE(ctypes.c_int)(
        core[RANGE_POP])


def main() -> None:
    nvtx = attach()
    print(f"nvtx ranges {'go to the tool' if nvtx else 'go nowhere (no NVTX tool)'}", file=sys.stderr)
    for step in range(5):
        if nvtx:
            nvtx[0](f"step {step}".encode())
        end = time.perf_counter() + 0.02
        while time.perf_counter() < end:
            pass
        if nvtx:
            nvtx[1]()


if __name__ == "__main__":
    main()
