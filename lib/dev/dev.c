/* SPDX-License-Identifier: BSD-3-Clause */
/* The device: geometry, read-modify-write and per-sector locking over a
 * store that only ever sees whole physical sectors.  This file: opening
 * it over its store stack and closing it, what it says about itself, what
 * strict refuses, lost writes per client connection, write log marks (the
 * data path is in dev_plan.h, dev_sync.c and dev_aio.c; dev_priv.h lists
 * the files). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "dev_priv.h"
#include "fault/fault.h"
#include "store/store_nbd.h"

/* The sequential zones file= restored that are not empty, after the
 * log's layout (docs/write-log.md "Zones"): a reader cannot tell their
 * pointers, or a host-aware zone's NON_SEQ, from the writes after. */
static int
log_zone_wps (struct s4k_dev *d)
{
  struct s4k_zones_info zi;
  s4k_zones_info (d->zones, &zi);
  struct s4k_zone_desc *desc = calloc (zi.nr_zones, sizeof *desc);
  if (!desc)
    return -ENOMEM;
  uint64_t listed;
  int n = s4k_zones_report (d->zones, 0, 0, false, desc, zi.nr_zones,
                            &listed);
  int r = n < 0 ? n : 0;
  for (int i = 0; i < n && r == 0; i++)
    if (desc[i].type != S4K_ZT_CONVENTIONAL && desc[i].wp != UINT64_MAX &&
        (desc[i].wp != desc[i].start || desc[i].non_seq))
      r = s4k_wlog_zone_wp (d->wlog, desc[i].start, desc[i].wp,
                            desc[i].non_seq);
  free (desc);
  return r;
}

/* ---- lifecycle --------------------------------------------------------- */

/* The store's `contended`: a lock-free read that met writers of its
 * sectors too often, again under the shared locks of its physical
 * sectors, which keep those writers out. */
static int
read_contended (void *opaque, const struct s4k_io *io)
{
  struct s4k_dev *d = opaque;
  if (!io->len)
    return 0;
  uint64_t first = s4k_sector_index (&d->g, io->off);
  uint64_t last = s4k_sector_index (&d->g, io->off + io->len - 1);
  s4k_lock (d->locks, first, last, true);
  int r = d->store->ops->read_locked (d->store, io, 1);
  s4k_unlock (d->locks, first, last, true);
  return r;
}

int
s4k_dev_new (struct s4k_dev **out, const struct s4k_config *c,
             struct s4k_store *store, char *err, size_t errlen)
{
  struct s4k_dev *d = calloc (1, sizeof *d);
  if (!d || !(d->locks = s4k_locks_new ())) {
    snprintf (err, errlen, "out of memory");
    free (d);
    store->ops->close (store);
    return -ENOMEM;
  }
  d->losses = &store->losses;
  if (c->fault.on &&
      !(store = fault_wrap (store, c, &d->fault, err, errlen))) {
    s4k_locks_free (d->locks);
    free (d);
    return -EINVAL;
  }
  d->g = c->geom;
  d->max_request = c->max_request;
  d->strict = c->strict;
  d->counting = c->stats_count;
  d->store = store;
  d->name = c->name;
  d->atomic = c->atomic;
  d->volatile_store = !c->file && !c->upstream;
  d->upstream = c->upstream;
  if (s4k_timing_enabled (&c->timing) &&
      !(d->timing = s4k_timing_new (&c->timing, &d->g))) {
    snprintf (err, errlen, "out of memory");
    s4k_locks_free (d->locks);
    free (d);
    store->ops->close (store);
    return -ENOMEM;
  }
  d->lockfree_reads = store->lockfree_reads;
  d->write_atomic = c->atomic.max && store->ops->write_atomic;
  store->atomic_max = c->atomic.max;
  if (d->lockfree_reads) {
    store->contended = read_contended;
    store->contended_opaque = d;
  }
  d->partial_writes = store->partial_writes;
  d->shift = s4k_sector_shift (&d->g);
  d->pmask = d->g.physical - 1;
  d->pbits = __builtin_ctz (d->g.physical);
  if (c->write_log &&
      s4k_wlog_create (&d->wlog, c->write_log, &d->g, c->name, err,
                       errlen) == -1) {
    s4k_timing_free (d->timing);
    s4k_locks_free (d->locks);
    free (d);
    store->ops->close (store);
    return -EINVAL;
  }
  d->lbits = __builtin_ctz (d->g.logical);
  if (c->zone.model != S4K_ZONED_NONE) {
    /* Checked again with the size the store gave (upstream=). */
    struct s4k_zone_config zc = c->zone;
    int r = s4k_zone_finish (&zc, &d->g, err, errlen);
    if (r == 0 && (r = s4k_zones_new (&d->zones, &zc, &d->g)) < 0)
      snprintf (err, errlen, "zoned=: %s", s4k_strerror (-r));
    /* The log's entry 1: the layout, for its readers (sect4k-crash). */
    if (r == 0 && d->wlog && (r = s4k_wlog_zones (d->wlog, &zc)) < 0) {
      snprintf (err, errlen, "write-log=%s: %s", c->write_log,
                s4k_strerror (-r));
      s4k_zones_free (d->zones);
    }
    if (r) {
      s4k_wlog_free (d->wlog);
      s4k_timing_free (d->timing);
      s4k_locks_free (d->locks);
      free (d);
      store->ops->close (store);
      return -EINVAL;
    }
  }
  if (c->file && dev_format_record_init (d, c->file, err, errlen) == -1) {
    s4k_zones_free (d->zones);
    s4k_wlog_free (d->wlog);
    s4k_timing_free (d->timing);
    s4k_locks_free (d->locks);
    free (d);
    store->ops->close (store);
    return -ENOMEM;
  }
  /* The zone state the file was left with (a new file: all empty). */
  if (d->zones && c->file &&
      dev_zones_file_open (d, c, err, errlen) == -1) {
    free (d->geom_record);
    s4k_zones_free (d->zones);
    s4k_wlog_free (d->wlog);
    s4k_timing_free (d->timing);
    s4k_locks_free (d->locks);
    free (d);
    store->ops->close (store);
    return -EINVAL;
  }
  /* The fault layer's durable pointers start at the zones' (file=: as
   * the file left them), and the log says where they start. */
  if (d->zones && (d->fault || (d->wlog && c->file))) {
    int r = d->fault ? fault_set_zones (d->fault, d->zones) : 0;
    if (r == 0 && d->wlog && c->file)
      r = log_zone_wps (d);
    if (r) {
      snprintf (err, errlen, "zoned=: %s", s4k_strerror (-r));
      dev_zones_file_close (d);
      free (d->geom_record);
      s4k_zones_free (d->zones);
      s4k_wlog_free (d->wlog);
      s4k_timing_free (d->timing);
      s4k_locks_free (d->locks);
      free (d);
      store->ops->close (store);
      return -EINVAL;
    }
  }
  /* Every request of a zoned device passes the zone checks: no fast
   * path skips them (s4k_read_iov's included; s4k_read and s4k_write
   * make them first, below). */
  d->fast_max = d->counting || d->zones ? 0 : d->max_request;
  /* A log entry, or a layer that must know which writes are atomic,
   * needs the plan.  A zoned device's writes of whole sectors take the
   * fast path too, after the zone check (s4k_write). */
  d->fast_write_max = d->counting || d->wlog || d->write_atomic ? 0
                      : d->max_request;
  /* Its reads too, after the zone check: where a conventional device's
   * take the fast path (a store whose reads need no lock). */
  d->fast_zoned_read_max = d->zones && d->lockfree_reads && !d->counting
                           ? d->max_request : 0;
  stats_init (&d->stats, &d->g);
  stats_saver_init (&d->saver, d, c);
  *out = d;
  return 0;
}

int
s4k_dev_open (struct s4k_dev **out, const struct s4k_config *c,
              char *err, size_t errlen)
{
  struct s4k_config cfg = *c;
  struct s4k_store *store = NULL;

  /* A FORMAT UNIT on an earlier start changed the logical size. */
  if (cfg.file && dev_format_record_apply (&cfg, err, errlen) == -1)
    return -EINVAL;
  /* A zone layout that is not the file's, before size= grows it. */
  if (cfg.file && dev_zones_file_check (&cfg, err, errlen) == -1)
    return -EINVAL;
  /* The file store may take the size from the file. */
  if (cfg.file && !(store = s4k_file_store_new (&cfg, &cfg.geom.size,
                                                err, errlen)))
    return -EINVAL;
  if (cfg.upstream && !(store = s4k_nbd_store_new (&cfg, &cfg.geom.size,
                                                   err, errlen)))
    return -EINVAL;
  if (s4k_geometry_check (&cfg.geom, err, errlen) == -1) {
    if (store)
      store->ops->close (store);
    return -EINVAL;
  }
  /* zone-reformat=true: the data goes before the zone state says so. */
  if (cfg.file && dev_zones_reformat_data (&cfg, store, err, errlen) == -1) {
    store->ops->close (store);
    return -EINVAL;
  }
  if (!store && !(store = s4k_mem_store_new (&cfg.geom, err, errlen)))
    return -ENOMEM;
  return s4k_dev_new (out, &cfg, store, err, errlen);
}

void
s4k_dev_start (struct s4k_dev *d)
{
  stats_saver_start (&d->saver);
  if (d->fault)
    fault_start (d->fault, d);
}

void
s4k_dev_close (struct s4k_dev *d)
{
  if (!d)
    return;
  stats_saver_close (&d->saver);
  if (d->fault)
    fault_stop (d->fault);
  s4k_dev_stop (d);             /* a write cache written back: bounded */
  d->store->ops->close (d->store);
  s4k_locks_free (d->locks);
  stats_free (&d->stats);
  s4k_timing_free (d->timing);
  s4k_wlog_free (d->wlog);
  free (d->geom_record);
  dev_zones_file_close (d);
  s4k_zones_free (d->zones);
  free (d);
}

/* ---- lost writes, per client connection -------------------------------- */

uint64_t
s4k_client_begin (struct s4k_dev *d, struct s4k_client *c, enum s4k_op op,
                  unsigned flags)
{
  switch (op) {
  case S4K_OP_WRITE: case S4K_OP_ZERO: case S4K_OP_TRIM:
    return flags & S4K_FUA ? 0 : atomic_load (d->losses) + 1;
  case S4K_OP_FLUSH:
    /* Writes that end after this may not be covered: they note
     * themselves again. */
    return atomic_exchange (&c->since, 0);
  default:
    return 0;
  }
}

int
s4k_client_end (struct s4k_dev *d, struct s4k_client *c, enum s4k_op op,
                uint64_t tag, int r)
{
  if (!tag)
    return r;
  if (op == S4K_OP_FLUSH)       /* a loss since its oldest write */
    return r == 0 && atomic_load (d->losses) >= tag ? -EIO : r;
  if (r == 0) {                 /* the oldest unflushed write's tag */
    uint64_t old = atomic_load (&c->since);
    while ((old == 0 || old > tag) &&
           !atomic_compare_exchange_weak (&c->since, &old, tag))
      ;
  }
  return r;
}

/* The timing model runs in the front ends once the data work is done:
 * nothing of it is on the data path above. */
bool
s4k_dev_timed (const struct s4k_dev *d)
{
  return d->timing != NULL;
}

uint64_t
s4k_dev_timing (struct s4k_dev *d, enum s4k_op op, uint64_t len,
                uint64_t off, int r)
{
  if (!d->timing || r != 0 || op == S4K_OP_EXTENTS || op == S4K_OP_CACHE)
    return 0;                   /* refused at once, or no media work */
  struct s4k_timing_cost c;
  const uint64_t now = s4k_now_ns ();
  const uint64_t due = s4k_timing_schedule (d->timing, op, len, off, now, &c);
  if (d->counting)
    stats_count_time (&d->stats, op, &c);
  return due > now ? due : 0;
}

void
s4k_dev_stats (const struct s4k_dev *d, struct s4k_stats *out)
{
  stats_sum ((struct stats_state *) &d->stats, out);
  out->upstream = d->upstream;
  out->upstream_losses = atomic_load (d->losses);
}

struct s4k_fault *
dev_fault (const struct s4k_dev *d)
{
  return d->fault;
}

const char *
s4k_dev_name (const struct s4k_dev *d)
{
  return d->name;
}

const struct s4k_atomic *
s4k_dev_atomic (const struct s4k_dev *d)
{
  return &d->atomic;
}

struct s4k_zones *
s4k_dev_zones (const struct s4k_dev *d)
{
  return d->zones;
}

const struct s4k_geometry *
s4k_dev_geometry (const struct s4k_dev *d)
{
  return &d->g;
}

uint32_t
s4k_dev_max_request (const struct s4k_dev *d)
{
  return d->max_request;
}

bool
s4k_dev_can_fast_zero (const struct s4k_dev *d)
{
  return d->store->ops->can_fast_zero (d->store);
}

bool
s4k_dev_readonly (const struct s4k_dev *d)
{
  return d->store->ops->readonly && d->store->ops->readonly (d->store);
}

const char *
s4k_dev_store_info (const struct s4k_dev *d)
{
  return d->store->ops->info ? d->store->ops->info (d->store) : d->store->ops->name;
}

void
s4k_dev_set_debug (struct s4k_dev *d, unsigned mask, s4k_debug_fn *fn,
                   void *opaque)
{
  d->debug_mask = fn ? mask : 0;
  d->debug_fn = fn;
  d->debug_opaque = opaque;
}

static void
format_sector_size (char *buf, size_t len, uint32_t n)
{
  if (n >= 1024 && n % 1024 == 0)
    snprintf (buf, len, "%" PRIu32 "k", n / 1024);
  else
    snprintf (buf, len, "%" PRIu32, n);
}

void
s4k_dev_describe (const struct s4k_dev *d, char *buf, size_t len)
{
  char l[16];
  format_sector_size (l, sizeof l, d->g.logical);
  snprintf (buf, len, "%s%s: logical %" PRIu32 ", physical %" PRIu32
            ", alignment offset %" PRIu32 " (lowest aligned LBA %" PRIu64 ")",
            l, d->g.logical == d->g.physical ? "n" : "e",
            d->g.logical, d->g.physical, d->g.alignment,
            s4k_lowest_aligned (&d->g));
}

/* ---- request checks ---------------------------------------------------- */

static bool
misaligned (const struct s4k_dev *d, uint64_t len, uint64_t off)
{
  return ((off | len) & (d->g.logical - 1)) != 0;
}

/* Reads and writes carry a payload, bounded by the advertised maximum. */
static bool
too_long (const struct s4k_dev *d, enum s4k_op op, uint64_t len)
{
  return (op == S4K_OP_READ || op == S4K_OP_WRITE) && len > d->max_request;
}

bool
s4k_refused (const struct s4k_dev *d, enum s4k_op op, uint64_t len,
             uint64_t off)
{
  return d->strict && op != S4K_OP_FLUSH &&
         (misaligned (d, len, off) || too_long (d, op, len));
}

void
s4k_explain_refusal (const struct s4k_dev *d, enum s4k_op op, uint64_t len,
                     uint64_t off, char *buf, size_t buflen)
{
  if (too_long (d, op, len))
    snprintf (buf, buflen, "%s at offset %" PRIu64 " length %" PRIu64
              " refused: longer than the advertised maximum request %" PRIu32
              " (strict=true)", s4k_op_names[op], off, len, d->max_request);
  else
    snprintf (buf, buflen, "%s at offset %" PRIu64 " length %" PRIu64
              " refused: offset and length must be multiples of the logical "
              "sector size %" PRIu32 " (strict=true)",
              s4k_op_names[op], off, len, d->g.logical);
}


int
s4k_dev_wlog_mark (struct s4k_dev *d, const char *name)
{
  return d->wlog ? s4k_wlog_mark (d->wlog, name) : -ENOTSUP;
}
