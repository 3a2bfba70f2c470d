/* bcryptprimitives.dll with the one function Rust's standard library imports from it on
 * Windows, ProcessPrng, which Wine 8 lacks: forwarded to advapi32's RtlGenRandom
 * (SystemFunction036). Built by .ci/windows.sh with mingw and placed beside the test
 * executables, so that Rust programs start under Wine. Not shipped: real Windows (8.1 and
 * later) has the function. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

/* Always TRUE, as documented for the real one; a failure of the source it forwards to cannot
 * be reported, so it aborts instead of returning bytes that are not random. */
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG chunk = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk)) {
            FatalAppExitA(0, "ProcessPrng: RtlGenRandom failed");
        }
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
