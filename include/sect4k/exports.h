/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k export table: many devices from one server.
 *
 * The front ends feed every key=value to s4k_exports_set instead of
 * s4k_config_set.  export=NAME starts a new export: the keys after it,
 * until the next export=, are that export's.  Keys before the first
 * export= are defaults for every export.  exports=512n,4kn (before the
 * first export=) adds one export per preset, named after it.  Without
 * export= or exports=, there is exactly one export, unnamed (name ""),
 * as before.  The first export is the default one (the one "" selects).
 */
#ifndef SECT4K_EXPORTS_H
#define SECT4K_EXPORTS_H

#include "sect4k/sect4k.h"

#define S4K_EXPORT_NAME_MAX 256u

struct s4k_export {
  char *name;                   /* "" for the single unnamed export */
  struct s4k_config cfg;        /* the defaults, then the export's keys */
  struct s4k_dev *dev;          /* after s4k_exports_open */
  char description[256];        /* after s4k_exports_open */
  char *write_log;              /* owned: the defaults' write-log= with the
                                   export's name inserted, or NULL */
  char *statsfile;              /* owned: the defaults' statsfile= with the
                                   export's name inserted, or NULL */
  char *control;                /* owned: the defaults' control= with the
                                   export's name inserted, or NULL */
};

struct s4k_exports {
  struct s4k_config defaults;
  bool readonly;                /* set by the front end before finish */
  bool readonly_per_connection; /* the same (see s4k_config) */
  bool named;                   /* export= or exports= given */
  bool presets_added;           /* exports= turned into exports */
  char *presets;                /* exports= value (copy), or NULL */
  struct s4k_export *v;
  size_t n;
};

void s4k_exports_init (struct s4k_exports *t);
/* One key=value: export=, exports=, or any key of s4k_config_set
 * (applied to the defaults or to the current export).  -1 with a line
 * in err naming the export, the key and the rule. */
int s4k_exports_set (struct s4k_exports *t, const char *key,
                     const char *value, char *err, size_t errlen);
/* True once a key would go to an export section rather than to the
 * defaults (for keys a front end handles itself and that cannot vary
 * per export). */
bool s4k_exports_in_section (const struct s4k_exports *t);
/* Finishes every export's config and checks the rules between exports
 * (duplicate names, shared file= or statsfile=). */
int s4k_exports_finish (struct s4k_exports *t, char *err, size_t errlen);
/* Opens every export's device and fills its description. */
int s4k_exports_open (struct s4k_exports *t, char *err, size_t errlen);
/* s4k_dev_start on every device (after any fork). */
void s4k_exports_start (struct s4k_exports *t);
/* Closes every device (final statistics) and frees the table. */
void s4k_exports_close (struct s4k_exports *t);
/* The export a client names: "" (len 0) is the first; NULL if none. */
struct s4k_export *s4k_exports_find (const struct s4k_exports *t,
                                     const char *name, size_t len);
/* "512n, 512e, 4kn": the names, for messages (truncated to fit). */
void s4k_exports_names (const struct s4k_exports *t, char *buf, size_t len);
/* What a client that names no known export is told, e.g. "no export
 * named 'x' (exports: 512n, 4kn)". */
void s4k_exports_unknown (const struct s4k_exports *t, const char *name,
                          char *buf, size_t len);

#endif
