/* SPDX-License-Identifier: BSD-3-Clause */
/* A LUN over a device, opened and run as sect4k-server --scsi does, for
 * the unit tests (after tap.h and devrig.h). */
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

/* A LUN over a device of the keys. */
struct scsi_rig {
  struct s4k_config c;
  struct s4k_dev *d;
  struct s4k_scsi_lun *lun;
  struct s4k_scsi_params p;
  const struct s4k_geometry *g;
  uint32_t L;                   /* logical block size */
};

/* Opening is three steps so a test can change what a key cannot give:
 * the config of the key lists (each NULL-terminated, or NULL), finished;
 * then the device and the LUN's parameters from it; then the LUN. */
TAP_UNUSED static void
scsi_rig_config (struct scsi_rig *t, const char *const *a,
                 const char *const *b, const char *const *c)
{
  char err[256];
  const char *const *lists[] = { a, b, c };
  s4k_config_init (&t->c);
  for (unsigned l = 0; l < 3; l++)
    for (unsigned i = 0; lists[l] && lists[l][i]; i++)
      if (rig_set (&t->c, lists[l][i], err, sizeof err))
        bail ("%s", err);
  if (s4k_config_finish (&t->c, err, sizeof err))
    bail ("%s", err);
}

TAP_UNUSED static void
scsi_rig_dev (struct scsi_rig *t)
{
  char err[256];
  if (s4k_dev_open (&t->d, &t->c, err, sizeof err))
    bail ("%s", err);
  t->g = s4k_dev_geometry (t->d);
  t->L = t->g->logical;
  s4k_scsi_params_from_config (&t->p, &t->c, t->g,
                               s4k_dev_max_request (t->d));
}

TAP_UNUSED static void
scsi_rig_lun (struct scsi_rig *t)
{
  char err[256];
  if (!(t->lun = s4k_scsi_lun_new (&t->p, err, sizeof err)))
    bail ("%s", err);
}

TAP_UNUSED static void
scsi_rig_close (struct scsi_rig *t)
{
  s4k_scsi_lun_free (t->lun);
  s4k_dev_close (t->d);
}

/* Runs one command on the rig; returns its status. */
TAP_UNUSED static uint8_t
scsi_rig_run (struct scsi_rig *t, const uint8_t *cdb, size_t cdb_len,
              void *data, size_t data_len)
{
  return scsi_run (t->lun, t->d, cdb, cdb_len, data, data_len);
}

/* The last command failed with this sense (said when it did not). */
TAP_UNUSED static bool
sense_is (uint8_t key, uint8_t asc, uint8_t ascq)
{
  uint8_t k, a, q;
  bool iv;
  uint64_t info;
  if (last.status != S4K_SCSI_CHECK_CONDITION ||
      s4k_scsi_sense_parse (last.sense, last.sense_len, &k, &a, &q, &iv,
                            &info))
    return false;
  if (k != key || a != asc || q != ascq) {
    char s[128];
    s4k_scsi_sense_describe (k, a, q, s, sizeof s);
    diag ("sense: %s, want %x/%02x/%02x", s, key, asc, ascq);
    return false;
  }
  return true;
}

#endif
