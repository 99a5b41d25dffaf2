/* SPDX-License-Identifier: BSD-3-Clause */
/* Running SCSI commands on a LUN as a front end does, for the unit tests
 * (after tap.h). */
#ifndef S4K_SCSIRIG_H
#define S4K_SCSIRIG_H

#include "sect4k/scsi.h"
#include "sect4k/sect4k.h"

/* The last command's result, and what it ran. */
static struct s4k_scsi_cmd last;
static unsigned last_ops;           /* ops run, over every round */
static unsigned last_kinds;         /* bit per op kind run */

/* Runs one command on lun over device d; returns its status. */
TAP_UNUSED static uint8_t
scsi_run (struct s4k_scsi_lun *lun, struct s4k_dev *d, const uint8_t *cdb,
          size_t cdb_len, void *data, size_t data_len)
{
  last_ops = last_kinds = 0;
  unsigned n = s4k_scsi_exec (lun, &last, cdb, cdb_len, data, data_len, 0);
  while (n > 0) {
    unsigned i = 0;
    int r = 0;
    for (; i < n; i++) {
      last_ops++;
      last_kinds |= 1u << last.ops[i].kind;
      if ((r = s4k_scsi_op_run (d, &last.ops[i])) != 0)
        break;
    }
    n = s4k_scsi_done (lun, &last, i, r, 0);
  }
  s4k_scsi_cmd_release (&last);
  return last.status;
}

#endif
