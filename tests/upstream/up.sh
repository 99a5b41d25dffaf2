# SPDX-License-Identifier: BSD-3-Clause
# Helpers for the upstream tests, sourced after tests/lib.sh: upstream
# NBD servers to put sect4k in front of, and sect4k's two front ends.

# need_fronts PROG: both front ends (nbdkit with the plugin, and
# sect4k-server) and the test client $SECT4K_BUILD/tests/PROG, as
# $client; else the whole test skips.
need_fronts () {
  need nbdkit
  need_server
  client=$SECT4K_BUILD/tests/$1
  [ -x "$client" ] || skip_all "$client is not built"
}

# need_pynbd: libnbd's Python binding, with $py the python that has it;
# else the whole test skips.
need_pynbd () {
  py=/usr/bin/python3
  $py -c 'import nbd' 2>/dev/null || skip_all "python3-libnbd is not installed"
}

# skip_one DESCRIPTION: a TAP test that could not run.
skip_one () { tap_n=$((tap_n + 1)); echo "ok $tap_n # SKIP $*"; }

# have_upstream KIND: true if KIND can run here (else says why).
have_upstream () {
  case $1 in
    qcow2) command -v qemu-nbd >/dev/null && command -v qemu-img >/dev/null ;;
    *) command -v nbdkit >/dev/null ;;
  esac
}

# start_upstream KIND NAME: a 64 MiB export on $tmpdir/NAME.sock.  KIND:
# memory (nbdkit memory), file (nbdkit file on $tmpdir/NAME.img), qcow2
# (qemu-nbd on $tmpdir/NAME.qcow2, --cache=$qcow2_cache: writethrough
# where what it acknowledges must survive its SIGKILL, since qemu keeps
# qcow2 metadata in memory until a flush).  Images outlive restarts.
# Sets $up_uri and $up_pid.
start_upstream () {
  local kind=$1 name=$2
  case $kind in
    memory) start_nbdkit "$name" memory 64M || return 1 ;;
    file)
      [ -e "$tmpdir/$name.img" ] || truncate -s 64M "$tmpdir/$name.img"
      start_nbdkit "$name" file "$tmpdir/$name.img" || return 1 ;;
    qcow2)
      [ -e "$tmpdir/$name.qcow2" ] ||
        qemu-img create -q -f qcow2 "$tmpdir/$name.qcow2" 64M || return 1
      sock=$tmpdir/$name.sock
      rm -f "$sock"
      qemu-nbd -f qcow2 -k "$sock" -e 32 -t --cache="${qcow2_cache:-writeback}" \
        "$tmpdir/$name.qcow2" >"$tmpdir/$name.log" 2>&1 &
      pid=$!
      server_pids="$server_pids $pid"
      uri="nbd+unix:///?socket=$sock"
      wait_started nbdinfo --size "$uri" >/dev/null 2>&1 ||
        { diag "qemu-nbd did not start: $(cat "$tmpdir/$name.log")"; return 1; } ;;
  esac
  up_uri=$uri up_pid=$pid
}

stop_upstream () { kill "$up_pid" 2>/dev/null; wait "$up_pid" 2>/dev/null; }

# start_front FRONT NAME KEYS...: sect4k as FRONT (plugin: nbdkit with
# the plugin; server: sect4k-server; server1: sect4k-server with one
# event loop, whose one upstream connection serves every client); sets
# $uri and $pid.
start_front () {
  local front=$1 name=$2; shift 2
  case $front in
    plugin) start_nbdkit "$name" "$SECT4K_PLUGIN" "$@" ;;
    server) start_server "$name" "$@" ;;
    server1) start_server "$name" --threads 1 "$@" ;;
  esac
}
# stop_front FRONT: SIGTERM, and its exit status (0, or 143 for
# nbdkit's SIGTERM, is clean).  One still there after 30 s is hung
# (killed, status 1): under ASan, libp11-kit's exit handler (loaded with
# libnbd's GnuTLS) can wait forever on glibc's locale lock once libnbd
# has formatted an error with strerror (gdb: __freelocale from _dl_fini,
# the last thread).  That hang, seen twice a second apart, is not waited
# out: it cost lost.t 30 s a round.
exit_hung () {
  [ -n "${SECT4K_SAN:-}" ] && grep -q '^Threads:[[:space:]]*1$' "/proc/$1/status" 2>/dev/null &&
    grep -q futex "/proc/$1/wchan" 2>/dev/null
}
stop_front () {
  local st hung=0
  kill "$pid" 2>/dev/null
  for i in $(seq 300); do
    kill -0 "$pid" 2>/dev/null || break
    if [ $((i % 10)) = 0 ] && exit_hung "$pid"; then
      hung=$((hung + 1)); [ $hung -lt 2 ] || break
    fi
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    diag "$1 hung at exit"; kill -9 "$pid"; wait "$pid" 2>/dev/null; return 1
  fi
  wait "$pid"; st=$?
  [ "$1" = plugin ] && [ "$st" = 143 ] && st=0
  return $st
}

# every_write_flushed LOG: in nbdkit's -D log of an upstream (its
# connection=N Write/Flush lines), each connection that wrote had a flush
# after its last write; says the counts.
every_write_flushed () {
  $py - "$1" <<'PY' 2>&1 | sed 's/^/# /'
import re, sys
last_write, flushed = {}, {}
for n, line in enumerate(open(sys.argv[1])):
    m = re.search(r'connection=(\d+) (Write|Flush) id=\d+ .*\.\.\.$', line)
    if not m:
        continue
    c, what = m.groups()
    if what == 'Write':
        last_write[c] = n
    else:
        flushed[c] = n
bad = [c for c, n in last_write.items() if flushed.get(c, -1) < n]
print("connections that wrote: %d, not flushed after: %d" %
      (len(last_write), len(bad)))
sys.exit(1 if bad or not last_write else 0)
PY
  return "${PIPESTATUS[0]}"
}
