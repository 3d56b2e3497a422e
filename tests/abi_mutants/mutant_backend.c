/*
 * Deliberately broken backends for the loader's refusal tests and the CTS. Compiled once per
 * mutation (-DMUTATION=MUTANT_<X>) into libtessera-backend-mutant-<x>.so. Each one dlopens the
 * real host backend (TESSERA_HOST_BACKEND_PATH), copies its table and breaks it in one way:
 *
 *   WRONG_MAJOR       abi_major = 2                         -> VERSION_MISMATCH, names "major"
 *   MISSING_REQUIRED  memcpy_async = NULL                   -> FAILED_PRECONDITION, names it
 *   ONLY_V2           exports tessera_backend_get_api_v2 only -> VERSION_MISMATCH, names the symbol
 *   OLD_MINOR         struct_size ends right after the last required entry (event_query): the
 *                     optional entries after it are absent  -> loads, those entries NULL
 *   NEWER_MINOR       the table inside a larger struct, abi_minor + 1 -> loads normally
 *   INIT_FAILS        init returns TSR_NO_DRIVER, "mutant: driver missing on purpose"
 *   PARTIAL_MODULES   launch = NULL, the other three module entries kept -> loads, all four NULL
 *
 * Plain C like every backend: it sees backend_abi.h only.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "tessera/hal/backend_abi.h"

#define MUTANT_WRONG_MAJOR 1
#define MUTANT_MISSING_REQUIRED 2
#define MUTANT_ONLY_V2 3
#define MUTANT_OLD_MINOR 4
#define MUTANT_NEWER_MINOR 5
#define MUTANT_INIT_FAILS 6
#define MUTANT_PARTIAL_MODULES 7

#ifndef MUTATION
#error "compile with -DMUTATION=MUTANT_<X>"
#endif

/* The end of the last [required] entry; every entry after it is optional. */
#define LAST_REQUIRED_END \
  (offsetof(tsr_backend_api_v1, event_query) + sizeof(((tsr_backend_api_v1*)0)->event_query))
_Static_assert(LAST_REQUIRED_END == offsetof(tsr_backend_api_v1, event_elapsed_time),
               "event_elapsed_time must follow event_query directly");

/* A table from a future minor: the v1 fields first, then entries this header does not know. */
struct newer_table {
  tsr_backend_api_v1 v1;
  void (*future_entries[4])(void);
};

static struct newer_table g_table;

static const tsr_backend_api_v1* host_table(const tsr_host_info* host) {
  void* library = dlopen(TESSERA_HOST_BACKEND_PATH, RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    fprintf(stderr, "mutant backend: cannot load %s: %s\n", TESSERA_HOST_BACKEND_PATH, dlerror());
    return NULL;
  }
  tsr_get_api_v1_fn entry = (tsr_get_api_v1_fn)dlsym(library, TSR_BACKEND_ENTRY_POINT);
  return entry != NULL ? entry(host) : NULL;
}

#if MUTATION == MUTANT_INIT_FAILS
static char g_error[256];
static const tsr_backend_api_v1* g_host_api;
static _Thread_local int g_failed_here;

static tsr_status failing_init(const tsr_init_options* options) {
  (void)options;
  snprintf(g_error, sizeof g_error, "mutant: driver missing on purpose");
  g_failed_here = 1;
  return TSR_NO_DRIVER;
}

/* The mutant's own message on the thread whose init failed, the host backend's otherwise. */
static const char* mutant_last_error(void) {
  return g_failed_here ? g_error : g_host_api->last_error();
}
#endif

static const tsr_backend_api_v1* build(const tsr_host_info* host) {
  const tsr_backend_api_v1* real = host_table(host);
  if (real == NULL) return NULL;
  memset(&g_table, 0, sizeof g_table);
  memcpy(&g_table.v1, real, sizeof g_table.v1);
  tsr_backend_api_v1* t = &g_table.v1;
  t->name = MUTANT_NAME; /* "mutant-<x>", after the library file, as every backend names itself */
#if MUTATION == MUTANT_WRONG_MAJOR
  t->abi_major = 2;
#elif MUTATION == MUTANT_MISSING_REQUIRED
  t->memcpy_async = NULL;
#elif MUTATION == MUTANT_ONLY_V2
  (void)t;
#elif MUTATION == MUTANT_OLD_MINOR
  /* The fields beyond struct_size keep the host's pointers: a loader that reads past
   * struct_size would wrongly see them as present. */
  t->struct_size = LAST_REQUIRED_END;
#elif MUTATION == MUTANT_NEWER_MINOR
  t->struct_size = sizeof g_table;
  t->abi_minor = TSR_BACKEND_ABI_MINOR + 1;
  for (int i = 0; i < 4; ++i) g_table.future_entries[i] = (void (*)(void)) & build;
#elif MUTATION == MUTANT_INIT_FAILS
  g_host_api = real;
  t->init = failing_init;
  t->last_error = mutant_last_error;
#elif MUTATION == MUTANT_PARTIAL_MODULES
  t->launch = NULL;
#else
#error "unknown MUTATION"
#endif
  return t;
}

#if MUTATION == MUTANT_ONLY_V2
/* A backend of a future major: only the v2 symbol, which a v1 loader must not call. */
TSR_BACKEND_EXPORT const void* tessera_backend_get_api_v2(const void* host) {
  return build((const tsr_host_info*)host);
}
#else
TSR_BACKEND_EXPORT const tsr_backend_api_v1* tessera_backend_get_api_v1(const tsr_host_info* host) {
  return build(host);
}
#endif
