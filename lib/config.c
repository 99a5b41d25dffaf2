/* SPDX-License-Identifier: BSD-3-Clause */
/* key=value parameters shared by the nbdkit plugin and the server. */
#define _GNU_SOURCE             /* strerrordesc_np */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "sect4k/sect4k.h"
#include "store/store.h"

const char s4k_config_help[] =
  "size=SIZE             Device size (required unless file= exists or\n"
  "                      upstream= is given); the\n"
  "                      magic key: 'nbdkit sect4k 10G' works too.\n"
  "logical=SIZE          Logical sector size, power of two 512..64K (default 512).\n"
  "physical=SIZE         Physical sector size, power of two, logical..32M\n"
  "                      (default: the logical size).\n"
  "alignment-offset=N    Bytes from LBA 0 to the first physical boundary,\n"
  "                      multiple of logical, < physical (default 0).\n"
  "lowest-aligned=LBA    Alignment as scsi_debug's lowest aligned LBA\n"
  "                      (alternative to alignment-offset).\n"
  "model=NAME            Preset: 512n, 512e, 512e-xp (512e, lowest aligned\n"
  "                      LBA 7), 4kn.  Explicit keys override it.\n"
  "max-request=SIZE      Largest request advertised, multiple of logical\n"
  "                      (default 32M, at most 64M).\n"
  "strict=BOOL           Refuse requests not aligned to the logical size with\n"
  "                      EINVAL (default true); false serves them through RMW.\n"
  "file=PATH             Keep the data in a file or block device instead of\n"
  "                      memory.\n"
  "direct=BOOL           Open file= with O_DIRECT (default false).\n"
  "io=uring|sync         File I/O through io_uring (default) or pread/pwrite.\n"
  "upstream=URI          Keep the data in another NBD server's export (any\n"
  "                      URI libnbd takes: nbd://, nbd+unix://, nbds://).\n"
  "upstream-connections=N  Connections to upstream=, 1..64 (default 4).\n"
  "upstream-timeout=TIME The connect at start, and each request, fail (one\n"
  "                      line, EIO) when upstream= answers nothing for TIME\n"
  "                      (default 30s; 0: wait forever); then connect again.\n"
  "upstream-partial-writes=BOOL  Send a write that cuts physical sectors\n"
  "                      upstream as it is, the upstream merging it (one\n"
  "                      round trip, not a read and a write); false: the\n"
  "                      upstream sees whole physical sectors only (default\n"
  "                      true where its minimum block size allows it).\n"
  "statsfile=PATH        Write statistics as JSON at exit (and every\n"
  "                      stats-interval seconds), atomically.\n"
  "stats-interval=SECS   Seconds between statsfile updates (default 0:\n"
  "                      at exit only).\n"
  "stats=BOOL            Print a statistics summary to stderr at exit\n"
  "                      (default false).\n"
  "export=NAME           Start an export named NAME: the keys after it (until\n"
  "                      the next export=) are its own; keys before the first\n"
  "                      export= are defaults for every export.  The first\n"
  "                      export is the default one (empty name).\n"
  "exports=LIST          One export per preset in LIST, named after it, e.g.\n"
  "                      exports=512n,512e,512e-xp,4kn (before any export=).\n"
  "                      With several exports, a default statsfile=s.json\n"
  "                      becomes s.NAME.json for each (write-log= too).\n"
  "interface=scsi|sata   The SCSI disk (sect4k-server --scsi) as a SCSI\n"
  "                      disk (default) or as a SATA drive behind a SCSI/ATA\n"
  "                      Translation layer: ATA PASS-THROUGH, IDENTIFY DEVICE,\n"
  "                      SMART (hdparm -I, smartctl -d sat).\n"
  "write-log=PATH        Log every write, zero, trim, flush and mark with its\n"
  "                      data, in dm-log-writes' format (docs/write-log.md).\n"
  S4K_FAULT_HELP
  S4K_ATOMIC_HELP
  S4K_ZONE_HELP
  "timing=hdd7200|ssd|none  Model a drive's service time: presets for the\n"
  "                      keys below (default none: no delay).\n"
  "latency-read=DURATION Base time per read, e.g. 500us, 4ms (default 0).\n"
  "latency-write=DURATION  Base time per write, zero, trim, flush.\n"
  "latency-rmw=DURATION  Extra time per physical sector read-modify-written.\n"
  "rate=BYTES            Transfer rate per second, charged for the whole\n"
  "                      physical sectors a request touches (0: free).\n"
  "queue-depth=N         Requests the drive serves at once; the rest wait\n"
  "                      in order (default unlimited, 32 with a preset).\n";

struct preset {
  const char *name;
  uint32_t logical, physical;
  uint64_t lowest_aligned;
};
static const struct preset presets[] = {
  { "512n", 512, 512, 0 },
  { "512e", 512, 4096, 0 },
  { "512e-xp", 512, 4096, 7 },
  { "4kn", 4096, 4096, 0 },
};

int
s4k_parse_size (const char *str, uint64_t *out)
{
  const char *p = str;
  uint64_t v = 0;
  unsigned shift = 0;

  while (isspace ((unsigned char) *p))
    p++;
  if (!isdigit ((unsigned char) *p))
    return -1;
  for (; isdigit ((unsigned char) *p); p++) {
    unsigned d = *p - '0';
    if (v > (UINT64_MAX - d) / 10)
      return -1;
    v = v * 10 + d;
  }
  switch (*p) {
  case '\0': break;
  case 'b': case 'B': p++; break;
  case 'k': case 'K': shift = 10; p++; break;
  case 'm': case 'M': shift = 20; p++; break;
  case 'g': case 'G': shift = 30; p++; break;
  case 't': case 'T': shift = 40; p++; break;
  case 'p': case 'P': shift = 50; p++; break;
  case 'e': case 'E': shift = 60; p++; break;
  default: return -1;
  }
  if (*p != '\0')
    return -1;
  if (shift && v > ((uint64_t) INT64_MAX >> shift))
    return -1;
  v <<= shift;
  if (v > (uint64_t) INT64_MAX)
    return -1;
  *out = v;
  return 0;
}

const char *
s4k_strerror (int errnum)
{
  const char *s = strerrordesc_np (errnum);
  return s ? s : "Unknown error";
}

int
s4k_parse_bool (const char *str, bool *out)
{
  static const char *yes[] = { "1", "true", "on", "yes" };
  static const char *no[] = { "0", "false", "off", "no" };
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp (str, yes[i]) == 0) { *out = true; return 0; }
    if (strcasecmp (str, no[i]) == 0) { *out = false; return 0; }
  }
  return -1;
}

void
s4k_config_init (struct s4k_config *c)
{
  memset (c, 0, sizeof *c);
  c->strict = true;
  c->partial_writes = true;
  c->upstream_timeout = 30 * UINT64_C (1000000000);
  const char *e = getenv ("SECT4K_NO_URING");
  c->no_uring = e && *e && strcmp (e, "0") != 0;
}

/* Parses a size that must fit in 32 bits. */
static int
parse_u32 (const char *key, const char *value, uint32_t *out,
           char *err, size_t errlen)
{
  uint64_t v;
  if (s4k_parse_size (value, &v) == -1 || v > UINT32_MAX) {
    snprintf (err, errlen, "%s=%s: not a valid size (a number with an "
              "optional k/M/G suffix, below 4G)", key, value);
    return -1;
  }
  *out = v;
  return 0;
}

int
s4k_config_set (struct s4k_config *c, const char *key, const char *value,
                char *err, size_t errlen)
{
  if (strcmp (key, "size") == 0) {
    if (s4k_parse_size (value, &c->geom.size) == -1) {
      snprintf (err, errlen, "size=%s: not a valid size (a number with an "
                "optional k/M/G/T/P/E suffix)", value);
      return -1;
    }
    c->have_size = true;
  }
  else if (strcmp (key, "logical") == 0) {
    if (parse_u32 (key, value, &c->geom.logical, err, errlen) == -1)
      return -1;
    c->have_logical = true;
  }
  else if (strcmp (key, "physical") == 0) {
    if (parse_u32 (key, value, &c->geom.physical, err, errlen) == -1)
      return -1;
    c->have_physical = true;
  }
  else if (strcmp (key, "alignment-offset") == 0) {
    if (parse_u32 (key, value, &c->geom.alignment, err, errlen) == -1)
      return -1;
    c->have_alignment = true;
  }
  else if (strcmp (key, "lowest-aligned") == 0) {
    if (s4k_parse_size (value, &c->lowest_aligned) == -1) {
      snprintf (err, errlen, "lowest-aligned=%s: not a valid LBA", value);
      return -1;
    }
    c->have_lowest_aligned = true;
  }
  else if (strcmp (key, "model") == 0) {
    size_t i;
    for (i = 0; i < sizeof presets / sizeof presets[0]; i++)
      if (strcmp (value, presets[i].name) == 0)
        break;
    if (i == sizeof presets / sizeof presets[0]) {
      snprintf (err, errlen, "model=%s: unknown model (known: 512n, 512e, "
                "512e-xp, 4kn)", value);
      return -1;
    }
    c->model = presets[i].name;
  }
  else if (strcmp (key, "max-request") == 0) {
    if (parse_u32 (key, value, &c->max_request, err, errlen) == -1)
      return -1;
    c->have_max_request = true;
  }
  else if (strcmp (key, "strict") == 0 || strcmp (key, "direct") == 0 ||
           strcmp (key, "stats") == 0 ||
           strcmp (key, "upstream-partial-writes") == 0) {
    bool *b = strcmp (key, "strict") == 0 ? &c->strict
            : strcmp (key, "direct") == 0 ? &c->direct
            : strcmp (key, "stats") == 0 ? &c->stats_summary
            : &c->partial_writes;
    c->have_partial_writes |= b == &c->partial_writes;
    if (s4k_parse_bool (value, b) == -1) {
      snprintf (err, errlen, "%s=%s: not a boolean (true/false, on/off, "
                "yes/no, 1/0)", key, value);
      return -1;
    }
  }
  else if (strcmp (key, "file") == 0) {
    if (*value == '\0') {
      snprintf (err, errlen, "file=: the path is empty");
      return -1;
    }
    c->file = value;
  }
  else if (strcmp (key, "upstream") == 0) {
    if (*value == '\0') {
      snprintf (err, errlen, "upstream=: the URI is empty");
      return -1;
    }
    c->upstream = value;
  }
  else if (strcmp (key, "upstream-connections") == 0) {
    uint64_t v;
    if (s4k_parse_size (value, &v) == -1 || v < 1 || v > 64) {
      snprintf (err, errlen, "upstream-connections=%s: must be a whole "
                "number from 1 to 64", value);
      return -1;
    }
    c->upstream_connections = v;
  }
  else if (strcmp (key, "upstream-timeout") == 0) {
    if (s4k_parse_duration (value, &c->upstream_timeout) == -1) {
      snprintf (err, errlen, "upstream-timeout=%s: not a duration (e.g. "
                "30s, 500ms, 0 for none; at most an hour)", value);
      return -1;
    }
    c->have_upstream_timeout = true;
  }
  else if (strcmp (key, "statsfile") == 0) {
    if (*value == '\0') {
      snprintf (err, errlen, "statsfile=: the path is empty");
      return -1;
    }
    c->statsfile = value;
  }
  else if (strcmp (key, "write-log") == 0) {
    if (*value == '\0') {
      snprintf (err, errlen, "write-log=: the path is empty");
      return -1;
    }
    c->write_log = value;
  }
  else if (strcmp (key, "stats-interval") == 0) {
    uint64_t v;
    char *end;
    errno = 0;
    v = strtoull (value, &end, 10);
    if (errno || end == value || *end || v == 0 || v > 86400 ||
        value[0] == '-') {
      snprintf (err, errlen, "stats-interval=%s: must be a whole number of "
                "seconds from 1 to 86400", value);
      return -1;
    }
    c->stats_interval = v;
  }
  else if (strcmp (key, "interface") == 0) {
    if (strcmp (value, "scsi") == 0)
      c->sata = false;
    else if (strcmp (value, "sata") == 0)
      c->sata = true;
    else {
      snprintf (err, errlen, "interface=%s: must be scsi or sata", value);
      return -1;
    }
  }
  else if (strcmp (key, "io") == 0) {
    if (strcmp (value, "uring") == 0)
      c->no_uring = false;
    else if (strcmp (value, "sync") == 0)
      c->no_uring = true;
    else {
      snprintf (err, errlen, "io=%s: must be uring or sync", value);
      return -1;
    }
  }
  else {
    int r = s4k_fault_config_set (&c->fault, key, value, err, errlen);
    if (r != 1)
      return r;
    r = s4k_timing_set (&c->timing, key, value, err, errlen);
    if (r != 1)
      return r;
    r = s4k_atomic_set (&c->atomic, key, value, err, errlen);
    if (r != 1)
      return r;
    r = s4k_zone_set (&c->zone, key, value, err, errlen);
    if (r != 1)
      return r;
    snprintf (err, errlen, "%s=%s: unknown parameter (see --help)",
              key, value);
    return -1;
  }
  return 0;
}

int
s4k_config_finish (struct s4k_config *c, char *err, size_t errlen)
{
  struct s4k_geometry *g = &c->geom;
  const struct preset *p = NULL;

  if (c->have_alignment && c->have_lowest_aligned) {
    snprintf (err, errlen, "alignment-offset=%" PRIu32 " and lowest-aligned="
              "%" PRIu64 ": give one of the two, not both",
              g->alignment, c->lowest_aligned);
    return -1;
  }
  if (c->model)
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
      if (strcmp (c->model, presets[i].name) == 0)
        p = &presets[i];

  if (!c->have_logical)
    g->logical = p ? p->logical : 512;
  if (!c->have_physical)
    g->physical = p ? p->physical : g->logical;
  if (!c->have_max_request)
    c->max_request = S4K_DEFAULT_MAX_REQUEST;
  if (!c->have_alignment) {
    uint64_t lba = c->have_lowest_aligned ? c->lowest_aligned
                                          : p ? p->lowest_aligned : 0;
    /* scsi_debug's meaning: A = (lowest_aligned * L) mod P. */
    g->alignment = g->physical ?
      (uint32_t) (((unsigned __int128) lba * g->logical) % g->physical) : 0;
  }
  if (!c->have_size && !c->file && !c->upstream && !c->store_sized) {
    snprintf (err, errlen, "size: required (e.g. size=10G)");
    return -1;
  }
  if (c->have_size && s4k_geometry_check (g, err, errlen) == -1)
    return -1;
  if (!c->have_size) {
    /* The file store fills the size in; check the rest now. */
    struct s4k_geometry probe = *g;
    probe.size = g->logical;
    if (s4k_geometry_check (&probe, err, errlen) == -1)
      return -1;
  }
  if (c->max_request < g->logical || c->max_request % g->logical != 0 ||
      c->max_request > S4K_MAX_MAX_REQUEST || c->max_request < g->physical) {
    snprintf (err, errlen, "max-request=%" PRIu32 ": must be a multiple of "
              "logical=%" PRIu32 ", at least physical=%" PRIu32
              " and at most 67108864 (64M)", c->max_request,
              g->logical, g->physical);
    return -1;
  }
  /* Nobody reads the counters unless one of these asks: then the data
   * path does not keep them. */
  c->stats_count = c->statsfile || c->stats_summary || c->fault.control;
  if (c->stats_interval && !c->statsfile) {
    snprintf (err, errlen, "stats-interval=%" PRIu32 ": needs statsfile=",
              c->stats_interval);
    return -1;
  }
  if (c->file && c->upstream) {
    snprintf (err, errlen, "file=%s and upstream=%s: give one of the two, "
              "not both", c->file, c->upstream);
    return -1;
  }
  if (c->upstream_connections && !c->upstream) {
    snprintf (err, errlen, "upstream-connections=%" PRIu32 ": needs "
              "upstream=", c->upstream_connections);
    return -1;
  }
  if (c->have_upstream_timeout && !c->upstream) {
    snprintf (err, errlen, "upstream-timeout=%gs: needs upstream=",
              c->upstream_timeout / 1e9);
    return -1;
  }
  if (c->have_partial_writes && !c->upstream && !c->store_sized) {
    snprintf (err, errlen, "upstream-partial-writes=%s: needs upstream=",
              c->partial_writes ? "true" : "false");
    return -1;
  }
  if (c->direct && !c->file) {
    snprintf (err, errlen, "direct=true: needs file=");
    return -1;
  }
  if (s4k_fault_config_finish (&c->fault, g, err, errlen) == -1)
    return -1;
  if (s4k_atomic_finish (&c->atomic, g, c->max_request, err, errlen) == -1)
    return -1;
  /* Without size= (upstream=) the zones are checked once the store gave
   * the size: s4k_dev_open. */
  if ((c->have_size || c->zone.model == S4K_ZONED_NONE) &&
      s4k_zone_finish (&c->zone, g, err, errlen) == -1)
    return -1;
  if (c->zone.model != S4K_ZONED_NONE) {
    /* With file=, the zone state is kept beside the file, in
     * FILE.sect4k-zones (lib/dev/dev_zones.c): a block device has no
     * place for it. */
    struct stat st;
    if (c->file && stat (c->file, &st) == 0 && !S_ISREG (st.st_mode)) {
      snprintf (err, errlen, "zoned= and file=%s: not a regular file (the "
                "zone state is kept beside the file, in FILE.sect4k-zones)",
                c->file);
      return -1;
    }
    if (c->zone.reformat && !c->file) {
      snprintf (err, errlen, "zone-reformat=true: needs file= (the zones "
                "of a memory device start empty)");
      return -1;
    }
    if (!c->strict) {
      snprintf (err, errlen, "zoned= and strict=false: a zoned drive takes "
                "whole logical blocks only");
      return -1;
    }
  }
  return s4k_timing_finish (&c->timing, err, errlen);
}

bool
s4k_upstream_partial_writes (const struct s4k_config *c, uint64_t min)
{
  return c->partial_writes &&
         (min <= 1 || (c->strict && c->geom.logical % min == 0));
}
