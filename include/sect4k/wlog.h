/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k write log: every write, zero, trim and flush a device accepted,
 * with its data, in order, in dm-log-writes' on-disk format (Linux
 * Documentation/admin-guide/device-mapper/log-writes.rst), so that
 * replay-log reads ours and our reader reads the kernel's.  The format,
 * what sect4k adds to it and what "order" means: docs/write-log.md.
 *
 * The writer (write-log=PATH, lib/dev/dev_plan.h) and the reader (scripts/
 * sect4k-crash, tests) are both here, in lib/wlog.c. */
#ifndef SECT4K_WLOG_H
#define SECT4K_WLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sect4k/sect4k.h"

#define S4K_WLOG_MAGIC   0x6a736677736872ULL
#define S4K_WLOG_VERSION 1u
/* Entry sector and nr_sectors count units of the super block's
 * sectorsize, the logical sector size of the device logged (the kernel's
 * too), and each entry's header takes one such sector.  Every entry
 * sect4k writes is whole logical sectors: what the device holds there
 * after the request (strict=false: with the bytes an unaligned request
 * left alone).  Readers should use the byte fields off and len. */

/* Entry flags: Linux's ... */
#define S4K_WLOG_FLUSH    (1u << 0)   /* all entries before it had completed
                                         when the flush was sent: durable
                                         once it completed */
#define S4K_WLOG_FUA      (1u << 1)   /* this write was durable when done */
#define S4K_WLOG_DISCARD  (1u << 2)   /* a trim: no data */
#define S4K_WLOG_MARK     (1u << 3)   /* a named mark: data is the name */
#define S4K_WLOG_METADATA (1u << 4)   /* Linux: REQ_META; sect4k never sets
                                         it */
/* ... and sect4k's, in bits Linux does not use, only on entries without
 * inline data (replay-log refuses any other flag on an entry with a
 * name): a zero request (NBD_CMD_WRITE_ZEROES), logged as a write of
 * zeroes, so a tool that knows nothing of the bit replays it right. */
#define S4K_WLOG_ZERO     (1u << 16)
/* Read, never written: with MARK, the geometry entry of logs written
 * before it became a plain MARK (replay-log refused them). */
#define S4K_WLOG_GEOMETRY (1u << 17)
/* On a write: the device wrote it atomically (all or nothing at a power
 * cut); sect4k-crash keeps or drops it whole (issue 27). */
#define S4K_WLOG_ATOMIC   (1u << 18)
/* The first entry of every log sect4k writes: a plain MARK named
 * "sect4k-geometry size=N logical=L physical=P alignment=A export=NAME"
 * (docs/write-log.md). */
#define S4K_WLOG_GEOMETRY_PREFIX "sect4k-geometry "
/* A zoned device's log (zoned=): entry 1 is a plain MARK with its zone
 * layout, "sect4k-zones zoned=MODEL zone-size=BYTES zone-conventional=N",
 * and each zone operation that succeeded is a plain MARK
 * "sect4k-zone OP lba=LBA" or "sect4k-zone OP all" (OP: close, finish,
 * open, reset; LBA: the zone's first logical block), logged after the
 * zone model took it; a reset's data follows as ZERO entries of each
 * zone's [start, old write pointer).  docs/write-log.md "Zones". */
#define S4K_WLOG_ZONES_PREFIX "sect4k-zones "
#define S4K_WLOG_ZONE_OP_PREFIX "sect4k-zone "
/* A zone's state where the log starts (not "sect4k-zone ": a reader
 * from before it takes it as a user's mark). */
#define S4K_WLOG_ZONE_WP_PREFIX "sect4k-zonewp "

/* ---- reader ----------------------------------------------------------- */

/* One entry, as s4k_wlog_next returns it.  mark stays valid until the
 * next call on the same reader, data until it is closed. */
struct s4k_wlog_entry {
  uint64_t index;        /* 0 for the first entry after the super block */
  uint64_t pos;          /* byte offset of the entry's header in the log */
  uint64_t sector;       /* as stored: units of sectorsize */
  uint64_t nr_sectors;   /* as stored: a write's data, the range trimmed;
                            0 for a flush without data and a mark */
  uint64_t flags;        /* S4K_WLOG_* (unknown bits are kept) */
  uint64_t data_len;     /* as stored: a mark's length (0 for writes: their
                            data is nr_sectors blocks after the header) */
  uint64_t off, len;     /* the same in bytes: the device range written or
                            trimmed (len 0: a flush or mark) */
  const void *data;      /* len bytes written (a write, a write of
                            zeroes, a flush with data); NULL for a trim,
                            a flush without data and a mark */
  const char *mark;      /* MARK: the name, NUL-terminated; else NULL */
  bool geometry;         /* the log's geometry entry (a mark that is no
                            user's) */
  bool zones;            /* the zone layout entry (entry 1; no user's) */
  unsigned zone_op;      /* a zone operation's mark (enum s4k_zone_op;
                            no user's), else 0 */
  bool zone_all;         /* zone_op: the ALL form */
  uint64_t zone_lba;     /* zone_op without ALL: the zone's first LBA */
  bool past_count;       /* after the super block's nr_entries: only with
                            S4K_WLOG_READ_TAIL (a writer that did not
                            close, e.g. killed) */
};

/* What a log's geometry entry says (known false: a log without one, e.g.
 * the kernel's). */
struct s4k_wlog_info {
  bool known;
  struct s4k_geometry geom;
  char export_name[256];  /* "" for the unnamed export */
  /* The zone layout entry's (model S4K_ZONED_NONE: none), checked
   * against the geometry as the keys are (s4k_zone_finish). */
  struct s4k_zone_config zone;
};

/* Read past nr_entries while whole entries follow (a log whose writer was
 * killed before it updated the super block); stop quietly at the first
 * incomplete one. */
#define S4K_WLOG_READ_TAIL 1u

struct s4k_wlog_reader;

/* Opens a log and checks its super block (magic, version, sector size)
 * and geometry entry if any.  0, or -1 with err filled with one line
 * naming the file and the problem. */
int s4k_wlog_open (struct s4k_wlog_reader **out, const char *path,
                   unsigned flags, char *err, size_t errlen);
void s4k_wlog_close (struct s4k_wlog_reader *r);
/* The super block's fields. */
uint64_t s4k_wlog_nr_entries (const struct s4k_wlog_reader *r);
uint32_t s4k_wlog_sectorsize (const struct s4k_wlog_reader *r);
const struct s4k_wlog_info *s4k_wlog_info (const struct s4k_wlog_reader *r);
/* The next entry (the geometry entry included: e->geometry).
 * data stays valid until s4k_wlog_close (the log is mapped):
 * 1 and *e filled, 0 at the end, -1 with err "PATH: entry N at byte B:
 * ..." for a truncated or corrupt entry (its data past the end of the
 * file, a sector past the device, a mark too long, ...). */
int s4k_wlog_next (struct s4k_wlog_reader *r, struct s4k_wlog_entry *e,
                   char *err, size_t errlen);
/* Back to the first entry. */
void s4k_wlog_rewind (struct s4k_wlog_reader *r);

/* ---- writer ----------------------------------------------------------- */

struct s4k_wlog;

/* Creates (truncates) the log at path for a device of geometry g and
 * export name (NULL: unnamed), writing the super block (sectorsize
 * g->logical) and the geometry entry.  0, or -1 with err
 * "write-log=PATH: ...". */
int s4k_wlog_create (struct s4k_wlog **out, const char *path,
                     const struct s4k_geometry *g, const char *export_name,
                     char *err, size_t errlen);
/* Appends one entry (thread-safe; entries are serialized in call order).
 * off and len in bytes, multiples of the logical sector size (else
 * -EINVAL); data: len bytes, or NULL for a write of zeroes (ZERO) or a
 * trim (DISCARD).  0 or -errno. */
int s4k_wlog_append (struct s4k_wlog *w, uint64_t flags, uint64_t off,
                     uint64_t len, const void *data);
/* A flush entry, then the super block's count. */
int s4k_wlog_flush (struct s4k_wlog *w);
/* A mark entry (name: 1..S4K_WLOG_MARK_MAX bytes, no NUL). */
#define S4K_WLOG_MARK_MAX 255u
int s4k_wlog_mark (struct s4k_wlog *w, const char *name);
/* The zone layout entry (z: finished keys, model not NONE); the
 * device writes it right after creating the log, as entry 1. */
int s4k_wlog_zones (struct s4k_wlog *w, const struct s4k_zone_config *z);
/* A zone operation's mark (op: enum s4k_zone_op; lba ignored when all). */
int s4k_wlog_zone_op (struct s4k_wlog *w, unsigned op, uint64_t lba,
                      bool all);
/* A sequential zone that is not empty where the log starts (file=
 * restored it), after the layout: "sect4k-zonewp lba=LBA wp=WP", and
 * " non-seq" if a host-aware zone was written off its pointer. */
int s4k_wlog_zone_wp (struct s4k_wlog *w, uint64_t lba, uint64_t wp,
                      bool non_seq);
/* The name of op ("close", "finish", "open", "reset"), or NULL. */
const char *s4k_wlog_zone_op_name (unsigned op);

/* Entries written so far (the geometry entry included). */
uint64_t s4k_wlog_entries (struct s4k_wlog *w);
/* Writes the final count and closes; 0 or -errno. */
int s4k_wlog_free (struct s4k_wlog *w);

/* A mark in the device's log (sect4k-ctl PATH mark NAME).  -ENOTSUP
 * without write-log=; -EINVAL for a bad name. */
int s4k_dev_wlog_mark (struct s4k_dev *d, const char *name);

#endif
