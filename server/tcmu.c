/* SPDX-License-Identifier: BSD-3-Clause */
/* One LUN's TCMU command ring (linux/target_core_user.h).
 *
 * The kernel maps a mailbox, a command ring and a data area through
 * /dev/uioN.  It appends entries at cmd_head and counts an interrupt;
 * we take them from cmd_tail, hand each CDB and its data to the SCSI
 * command layer (lib/scsi/scsi.c), run the engine operations it returns,
 * write status and sense into the same entry, advance cmd_tail and write
 * 4 bytes to the fd so that the kernel completes them.
 *
 * One thread per LUN, running the engine's synchronous calls: they may
 * sleep (locks, an upstream store, the timing model's delay), and a
 * thread of its own keeps that off the NBD event loops, which serve the
 * same devices at the same time.  Commands of one LUN run one after the
 * other, as the layer's ops do (completion in ring order, no OOOC). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* Its struct iovec is <sys/uio.h>'s, which sect4k.h brings already. */
#define _UAPI__LINUX_UIO_H
#define __LINUX_UIO_H
#include <linux/target_core_user.h>

#include "tcmu.h"

void log_msg (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

struct tcmu_ring {
  int fd;                       /* /dev/uioN */
  int stop_fd;                  /* eventfd: tcmu_ring_stop */
  void *map;
  size_t map_size;
  struct tcmu_mailbox *mb;
  struct s4k_dev *dev;
  struct s4k_scsi_lun *lun;
  struct s4k_client client;     /* the kernel's writes a loss may take */
  bool verbose;
  char uio[32];
  pthread_t thread;
};

/* The CDB's length from its operation code's group (SPC-5 4.2.5.1). */
static size_t
cdb_length (const uint8_t *cdb)
{
  switch (cdb[0] >> 5) {
  case 0: return 6;
  case 1: case 2: return 10;
  case 3: return cdb[0] == 0x7f ? 8u + cdb[7] : 6;  /* variable length */
  case 5: return 12;
  default: return 16;
  }
}

static bool
in_map (const struct tcmu_ring *r, uint64_t off, uint64_t len)
{
  return off <= r->map_size && len <= r->map_size - off;
}

static int
run_op (struct tcmu_ring *ring, const struct s4k_scsi_op *op, uint64_t *due)
{
  struct s4k_dev *dev = ring->dev;
  static const enum s4k_op kinds[] = {
    [S4K_SCSI_OP_READ] = S4K_OP_READ, [S4K_SCSI_OP_WRITE] = S4K_OP_WRITE,
    [S4K_SCSI_OP_ZERO] = S4K_OP_ZERO, [S4K_SCSI_OP_TRIM] = S4K_OP_TRIM,
    [S4K_SCSI_OP_FLUSH] = S4K_OP_FLUSH,
  };
  int r;
  /* FORMAT UNIT's new block length (this ring's commands run one at a
   * time, so none of its own is in flight) and ZBC OUT (zone state, or a
   * reset's data discarded): not client data, not timed. */
  if (op->kind == S4K_SCSI_OP_SET_LOGICAL || op->kind == S4K_SCSI_OP_ZONE)
    return s4k_scsi_op_run (dev, op);
  if (op->kind > S4K_SCSI_OP_FLUSH)
    return -EINVAL;
  const uint64_t tag = s4k_client_begin (dev, &ring->client, kinds[op->kind],
                                         op->flags);
  r = s4k_scsi_op_run (dev, op);
  r = s4k_client_end (dev, &ring->client, kinds[op->kind], tag, r);
  /* The timing model: the command completes when its last op would
   * have on the modelled drive. */
  uint64_t d = s4k_dev_timing (dev, kinds[op->kind], op->len, op->off, r);
  if (d > *due)
    *due = d;
  return r;
}

/* Runs one command entry and writes its response into it. */
static void
handle_cmd (struct tcmu_ring *r, struct tcmu_cmd_entry *ent, uint32_t len)
{
  /* Everything of the request is read before the response (a union
   * with it) is written. */
  const uint32_t niov = ent->req.iov_cnt;
  const uint64_t cdb_off = ent->req.cdb_off;
  struct iovec *iov = (struct iovec *)
    ((char *) ent + offsetof (struct tcmu_cmd_entry, req.iov));
  uint8_t status = S4K_SCSI_CHECK_CONDITION;
  uint8_t sense[S4K_SCSI_SENSE_MAX] = { 0 };
  uint32_t sense_len = 0;
  uint64_t total = 0, data_in = 0;
  void *bounce = NULL, *data = NULL;
  const size_t head = offsetof (struct tcmu_cmd_entry, req.iov);
  bool ok = in_map (r, cdb_off, 16) && len >= head &&
            niov <= (len - head) / sizeof *iov;
  for (uint32_t i = 0; ok && i < niov; i++) {
    ok = in_map (r, (uintptr_t) iov[i].iov_base, iov[i].iov_len);
    total += iov[i].iov_len;
  }
  const uint8_t *cdb = (const uint8_t *) r->map + cdb_off;
  if (ok && niov == 1)
    data = (char *) r->map + (uintptr_t) iov[0].iov_base;
  else if (ok && niov > 1) {
    /* The layer wants one buffer; the data area gives pages. */
    if (!(bounce = data = malloc (total)))
      ok = false;
    for (uint64_t i = 0, at = 0; ok && i < niov; at += iov[i].iov_len, i++)
      memcpy ((char *) bounce + at, (char *) r->map +
              (uintptr_t) iov[i].iov_base, iov[i].iov_len);
  }
  if (ok && in_map (r, cdb_off, cdb_length (cdb))) {
    struct s4k_scsi_cmd cmd;
    uint64_t due = 0;
    unsigned cuts = s4k_dev_power_cuts (r->dev);
    s4k_fault_epoch (cuts);
    unsigned n = s4k_scsi_exec (r->lun, &cmd, cdb, cdb_length (cdb), data,
                                total, cuts);
    while (n > 0) {
      unsigned i = 0;
      int e = 0;
      for (; i < n; i++)
        if ((e = run_op (r, &cmd.ops[i], &due)) != 0)
          break;
      n = s4k_scsi_done (r->lun, &cmd, i, e, s4k_dev_power_cuts (r->dev));
    }
    status = cmd.status;
    sense_len = cmd.sense_len < sizeof sense ? cmd.sense_len : sizeof sense;
    memcpy (sense, cmd.sense, sense_len);
    data_in = cmd.data_in_len < total ? cmd.data_in_len : total;
    if (r->verbose && status != S4K_SCSI_GOOD) {
      uint8_t key, asc, ascq;
      bool info_valid;
      uint64_t info;
      char what[128];
      const char *name = s4k_scsi_opcode_name (cdb[0]);
      if (s4k_scsi_sense_parse (sense, sense_len, &key, &asc, &ascq,
                                &info_valid, &info) == 0) {
        s4k_scsi_sense_describe (key, asc, ascq, what, sizeof what);
        log_msg ("%s: %s (opcode %02x): %s", r->uio, name ? name : "?",
                 cdb[0], what);
      }
    }
    s4k_scsi_cmd_release (&cmd);
    if (due) {
      struct timespec ts = { .tv_sec = due / 1000000000u,
                             .tv_nsec = due % 1000000000u };
      while (clock_nanosleep (CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL)
             == EINTR)
        ;
    }
  }
  else {
    /* A ring entry we cannot read: HARDWARE ERROR / INTERNAL TARGET
     * FAILURE (44h/00h), fixed format. */
    log_msg ("%s: %s", r->uio, bounce || niov <= 1 ? "malformed ring entry"
             : "out of memory for a command's data");
    sense[0] = 0x70;
    sense[2] = S4K_SENSE_HARDWARE_ERROR;
    sense[7] = 10;
    sense[12] = 0x44;
    sense_len = 18;
  }
  if (bounce) {
    for (uint64_t i = 0, at = 0; i < niov && at < data_in;
         at += iov[i].iov_len, i++) {
      uint64_t k = data_in - at < iov[i].iov_len ? data_in - at
                                                  : iov[i].iov_len;
      memcpy ((char *) r->map + (uintptr_t) iov[i].iov_base,
              (char *) bounce + at, k);
    }
    free (bounce);
  }
  ent->hdr.uflags = 0;
  ent->rsp.scsi_status = status;
  memset (ent->rsp.sense_buffer, 0, sizeof ent->rsp.sense_buffer);
  if (status != S4K_SCSI_GOOD)
    memcpy (ent->rsp.sense_buffer, sense, sense_len);
  /* Fewer data-in bytes than the initiator allowed (INQUIRY, MODE
   * SENSE), or the good part of a failed READ: the kernel passes on
   * that many (with a CHECK CONDITION only when told). */
  if ((r->mb->flags & TCMU_MAILBOX_FLAG_CAP_READ_LEN) && data_in > 0 &&
      (data_in < total || status != S4K_SCSI_GOOD)) {
    ent->hdr.uflags |= TCMU_UFLAG_READ_LEN;
    ent->rsp.read_len = data_in;
  }
}

/* Serves every entry between cmd_tail and cmd_head. */
static void
drain (struct tcmu_ring *r)
{
  struct tcmu_mailbox *mb = r->mb;
  char *cmdr = (char *) r->map + mb->cmdr_off;
  const uint32_t size = mb->cmdr_size;
  uint32_t tail = __atomic_load_n (&mb->cmd_tail, __ATOMIC_ACQUIRE);
  while (tail != __atomic_load_n (&mb->cmd_head, __ATOMIC_ACQUIRE)) {
    struct tcmu_cmd_entry *ent = (struct tcmu_cmd_entry *) (cmdr + tail);
    uint32_t len = tcmu_hdr_get_len (ent->hdr.len_op);
    if (len == 0 || len > size) {
      log_msg ("%s: ring entry of length %" PRIu32 " at %" PRIu32
               ": stopping", r->uio, len, tail);
      return;
    }
    if (tcmu_hdr_get_op (ent->hdr.len_op) == TCMU_OP_CMD)
      handle_cmd (r, ent, len);
    /* TCMU_OP_PAD fills the ring's end; TCMU_OP_TMR (task management)
     * only comes when asked for: nothing to answer. */
    tail = (tail + len) % size;
    __atomic_store_n (&mb->cmd_tail, tail, __ATOMIC_RELEASE);
    uint32_t kick = 0;
    if (write (r->fd, &kick, sizeof kick) != sizeof kick)
      log_msg ("%s: kick: %s", r->uio, s4k_strerror (errno));
  }
}

static void *
ring_thread (void *opaque)
{
  struct tcmu_ring *r = opaque;
  for (;;) {
    drain (r);
    struct pollfd p[2] = { { .fd = r->fd, .events = POLLIN },
                           { .fd = r->stop_fd, .events = POLLIN } };
    if (poll (p, 2, -1) == -1) {
      if (errno == EINTR)
        continue;
      log_msg ("%s: poll: %s", r->uio, s4k_strerror (errno));
      break;
    }
    if (p[1].revents)
      break;
    if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
      log_msg ("%s: the kernel removed the device", r->uio);
      break;
    }
    uint32_t count;
    if (read (r->fd, &count, sizeof count) == -1 && errno != EAGAIN &&
        errno != EINTR) {
      log_msg ("%s: read: %s", r->uio, s4k_strerror (errno));
      break;
    }
  }
  return NULL;
}

static int
read_hex_file (const char *path, uint64_t *v)
{
  FILE *f = fopen (path, "r");
  if (!f)
    return -1;
  int n = fscanf (f, "%" SCNx64, v);
  fclose (f);
  return n == 1 ? 0 : -1;
}

struct tcmu_ring *
tcmu_ring_start (const char *uio, struct s4k_dev *dev,
                 struct s4k_scsi_lun *lun, bool verbose, char *err,
                 size_t errlen)
{
  struct tcmu_ring *r = calloc (1, sizeof *r);
  char path[128];
  uint64_t size;
  if (!r) {
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  snprintf (r->uio, sizeof r->uio, "%s", uio);
  r->dev = dev;
  r->lun = lun;
  r->verbose = verbose;
  r->fd = r->stop_fd = -1;
  snprintf (path, sizeof path, "/sys/class/uio/%s/maps/map0/size", uio);
  if (read_hex_file (path, &size) == -1 || size < sizeof *r->mb) {
    snprintf (err, errlen, "%s: %s", path, s4k_strerror (errno));
    goto fail;
  }
  r->map_size = size;
  snprintf (path, sizeof path, "/dev/%s", uio);
  if ((r->fd = open (path, O_RDWR | O_CLOEXEC)) == -1 ||
      (r->map = mmap (NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd,
                      0)) == MAP_FAILED) {
    snprintf (err, errlen, "%s: %s", path, s4k_strerror (errno));
    r->map = NULL;
    goto fail;
  }
  r->mb = r->map;
  if (r->mb->version != TCMU_MAILBOX_VERSION ||
      !in_map (r, r->mb->cmdr_off, r->mb->cmdr_size)) {
    snprintf (err, errlen, "%s: TCMU mailbox version %u (expected %u)",
              path, r->mb->version, TCMU_MAILBOX_VERSION);
    goto fail;
  }
  if ((r->stop_fd = eventfd (0, EFD_CLOEXEC)) == -1) {
    snprintf (err, errlen, "eventfd: %s", s4k_strerror (errno));
    goto fail;
  }
  int e = pthread_create (&r->thread, NULL, ring_thread, r);
  if (e) {
    snprintf (err, errlen, "pthread_create: %s", s4k_strerror (e));
    goto fail;
  }
  return r;
fail:
  if (r->map)
    munmap (r->map, r->map_size);
  if (r->fd != -1)
    close (r->fd);
  if (r->stop_fd != -1)
    close (r->stop_fd);
  free (r);
  return NULL;
}

void
tcmu_ring_stop (struct tcmu_ring *r)
{
  if (!r)
    return;
  uint64_t one = 1;
  if (write (r->stop_fd, &one, sizeof one) != sizeof one)
    log_msg ("%s: cannot stop the ring thread: %s", r->uio,
             s4k_strerror (errno));
  pthread_join (r->thread, NULL);
  munmap (r->map, r->map_size);
  close (r->fd);
  close (r->stop_fd);
  free (r);
}
