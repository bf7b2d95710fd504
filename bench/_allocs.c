/* Count calls into CPython's PYMEM_DOMAIN_MEM and PYMEM_DOMAIN_OBJ allocators.
 *
 * tracemalloc sees only blocks still alive when a snapshot is taken, so it cannot say how many
 * allocations an operation made and freed again. This wraps the allocators the same way tracemalloc
 * does (PyMem_SetAllocator around the previous allocator) and only counts: every call is forwarded.
 * Objects served from CPython's free lists (small tuples, floats, frames) make no allocator call and
 * are not counted. Reallocs are counted apart, with their new sizes: a growing bytearray reallocs
 * many times, and the sum of those sizes is roughly what was copied.
 *
 * Built at run time by bench/micro.py (gcc -O2 -shared -fPIC) and loaded with ctypes.PyDLL, so every
 * call holds the GIL; the RAW domain, which may be used without it, is left alone.
 */
#include <Python.h>

static PyMemAllocatorEx original_mem, original_obj;
static unsigned long long calls, bytes_requested, reallocs, realloc_bytes;
static int installed;

static void *count_malloc(void *ctx, size_t size) {
    PyMemAllocatorEx *a = (PyMemAllocatorEx *)ctx;
    calls++;
    bytes_requested += size;
    return a->malloc(a->ctx, size);
}

static void *count_calloc(void *ctx, size_t nelem, size_t elsize) {
    PyMemAllocatorEx *a = (PyMemAllocatorEx *)ctx;
    calls++;
    bytes_requested += nelem * elsize;
    return a->calloc(a->ctx, nelem, elsize);
}

static void *count_realloc(void *ctx, void *ptr, size_t size) {
    PyMemAllocatorEx *a = (PyMemAllocatorEx *)ctx;
    if (ptr == NULL) {
        calls++;
        bytes_requested += size;
    } else {
        reallocs++;
        realloc_bytes += size;
    }
    return a->realloc(a->ctx, ptr, size);
}

static void forward_free(void *ctx, void *ptr) {
    PyMemAllocatorEx *a = (PyMemAllocatorEx *)ctx;
    a->free(a->ctx, ptr);
}

int allocs_install(void) {
    if (installed) return 0;
    PyMem_GetAllocator(PYMEM_DOMAIN_MEM, &original_mem);
    PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &original_obj);
    PyMemAllocatorEx hook = {NULL, count_malloc, count_calloc, count_realloc, forward_free};
    hook.ctx = &original_mem;
    PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &hook);
    hook.ctx = &original_obj;
    PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &hook);
    installed = 1;
    return 1;
}

void allocs_uninstall(void) {
    if (!installed) return;
    PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &original_mem);
    PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &original_obj);
    installed = 0;
}

unsigned long long allocs_calls(void) { return calls; }
unsigned long long allocs_bytes(void) { return bytes_requested; }
unsigned long long allocs_reallocs(void) { return reallocs; }
unsigned long long allocs_realloc_bytes(void) { return realloc_bytes; }
