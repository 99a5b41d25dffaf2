/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-server --scsi: each export as a local SCSI disk through the
 * kernel's userspace backstore (target_core_user) and tcm_loop.
 * configfs.c creates and removes the kernel's objects; tcmu.c serves one
 * LUN's command ring. */
#ifndef SECT4K_SERVER_TCMU_H
#define SECT4K_SERVER_TCMU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "sect4k/exports.h"
#include "sect4k/scsi.h"

/* ---- configfs.c ---------------------------------------------------------- */

/* Before anything is opened: root, configfs mounted, target_core_user
 * and tcm_loop loaded.  -1 with one line in err saying what is missing
 * and how to fix it. */
int scsi_check (char *err, size_t errlen);

struct scsi_front;
/* Removes what dead instances left, then creates one LUN per export,
 * waits for the kernel's disks and prints "/dev/sdX EXPORT" lines on
 * out (logged if NULL).  The calling thread must have SIGINT and SIGTERM blocked (the
 * ring threads inherit the mask).  NULL with err filled, everything
 * created so far removed again. */
struct scsi_front *scsi_start (struct s4k_exports *t, bool readonly,
                               bool verbose, FILE *out, char *err,
                               size_t errlen);
/* Export i's disk as the kernel names it ("sdb"). */
const char *scsi_front_disk (const struct scsi_front *f, size_t i);
/* Removes the disks, the target and the backstores (in that order). */
void scsi_stop (struct scsi_front *f);

/* ---- tcmu.c -------------------------------------------------------------- */

struct tcmu_ring;
/* Opens /dev/uioN of one backstore, maps its ring and starts the thread
 * that serves it with lun and dev.  NULL with err filled. */
struct tcmu_ring *tcmu_ring_start (const char *uio, struct s4k_dev *dev,
                                   struct s4k_scsi_lun *lun, bool verbose,
                                   char *err, size_t errlen);
/* Stops the thread (after the command it is running) and unmaps. */
void tcmu_ring_stop (struct tcmu_ring *r);

#endif
