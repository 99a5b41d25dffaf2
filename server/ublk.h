/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-server --ublk: each export as /dev/ublkbN through the kernel's
 * userspace block driver (ublk_drv, Linux 6.0+), driven by io_uring
 * commands on /dev/ublk-control and /dev/ublkcN. */
#ifndef SECT4K_SERVER_UBLK_H
#define SECT4K_SERVER_UBLK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "sect4k/exports.h"

/* Before anything is opened: /dev/ublk-control exists and we are root.
 * -1 with one line in err saying what is missing and how to fix it. */
int ublk_check (char *err, size_t errlen);

/* What no ublk device is, from export x's keys alone (zoned=host-aware;
 * zoned= with --ublk-recovery): -1 with err filled, else 0. */
int ublk_refused_keys (const struct s4k_export *x, bool named, bool recovery,
                       char *err, size_t errlen);

/* What the kernel's ublk parameters cannot say about export x: -1 with
 * err filled for a key that --ublk refuses (zoned=, an alignment
 * offset, a logical size above 4096), 0 otherwise (a warning for the
 * atomic-write limits is logged). */
int ublk_refused (const struct s4k_export *x, bool named, char *err,
                  size_t errlen);

struct ublk_front;
/* Removes the devices dead instances of ours left (with recovery, takes
 * over one held for the same export index and geometry: UBLK_F_USER_
 * RECOVERY_REISSUE, its I/O resent), then adds one ublk device per
 * export (with recovery: kept across this server's death), served by `queues` queues (a thread and an
 * io_uring each), starts them and prints "/dev/ublkbN EXPORT" lines on
 * out (logged if NULL).  The calling thread must have the stop signals
 * blocked (the queue threads inherit the mask).  NULL with err filled,
 * everything added so far removed again. */
struct ublk_front *ublk_start (struct s4k_exports *t, bool readonly,
                               bool recovery, unsigned queues, bool verbose,
                               FILE *out, char *err, size_t errlen);
/* Export i's block device as the kernel names it ("ublkb0"). */
const char *ublk_front_disk (const struct ublk_front *f, size_t i);
/* Stops and deletes the devices, after the requests in flight. */
void ublk_stop (struct ublk_front *f);

#endif
