# SPDX-License-Identifier: BSD-3-Clause
# Shell helpers for the tests: TAP output and an nbdkit running the plugin.
# Tests source this file; the Makefile exports SECT4K_PLUGIN, SECT4K_BUILD
# and SECT4K_SAN.

: "${SECT4K_PLUGIN:=$(cd "$(dirname "$0")/../.." && pwd)/sect4k.so}"
tap_n=0
tap_failed=0
ok () {        # ok CONDITION-EXIT-STATUS DESCRIPTION
  tap_n=$((tap_n + 1))
  if [ "$1" = 0 ]; then echo "ok $tap_n - $2"
  else echo "not ok $tap_n - $2"; tap_failed=$((tap_failed + 1)); fi
}
diag () { echo "$*" | sed 's/^/# /'; }
skip_all () { echo "1..0 # SKIP $*"; exit 0; }
done_testing () { echo "1..$tap_n"; [ "$tap_failed" = 0 ]; }
need () {      # need COMMAND...: skip the whole test if one is missing
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || skip_all "$c is not installed"
  done
}

# A sanitizer build of the plugin needs its runtime loaded into nbdkit.
sanitizer_env () {
  case "${SECT4K_SAN:-}" in
    asan) echo "LD_PRELOAD=$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)" \
               "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1" \
               "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1" ;;
    tsan) echo "LD_PRELOAD=$(gcc -print-file-name=libtsan.so)" \
               "TSAN_OPTIONS=halt_on_error=1:exitcode=66" ;;
  esac
}

# nbdkit with the sanitizer runtime the plugin build needs.
nbdkit_san () { env $(sanitizer_env) nbdkit "$@"; }

# SECT4K_STORE=file: the servers a test starts serve a new file under
# $tmpdir (file store) instead of memory.  Usage: $(store_arg NAME).
store_arg () { [ "${SECT4K_STORE:-memory}" != file ] || echo "file=$tmpdir/$1.img"; }

tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/sect4k-test.XXXXXX")
nbdkit_pids= server_pids=
cleanup () {
  for p in $nbdkit_pids $server_pids; do kill "$p" 2>/dev/null; done
  sleep 0.1
  rm -rf "$tmpdir"
}
trap cleanup EXIT INT TERM

# need_server: skips the test unless sect4k-server is built; sets $server.
need_server () {
  server=${SECT4K_SERVER:-$(dirname "$0")/../../sect4k-server}
  [ -x "$server" ] || skip_all "$server is not built"
}

# wait_started TEST...: waits up to 5 s for TEST to succeed while the
# server $pid runs; fails at once if it exits.
wait_started () {
  for _ in $(seq 100); do
    "$@" && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# start_server NAME ARGS...: sect4k-server on $tmpdir/NAME.sock, logging
# to $tmpdir/NAME.log; sets $sock, $pid, $uri.
start_server () {
  name=$1; shift
  sock=$tmpdir/$name.sock
  "$server" --unix "$sock" "$@" >"$tmpdir/$name.log" 2>&1 &
  pid=$!
  server_pids="$server_pids $pid"
  uri="nbd+unix:///?socket=$sock"
  wait_started test -S "$sock" || { diag "$(cat "$tmpdir/$name.log")"; return 1; }
}

# stop_server: SIGTERM; a server still there after 30 s is hung (killed,
# so the status is not 0).
stop_server () {
  kill "$pid"
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { diag "the server hung at exit"; kill -9 "$pid"; }
  wait "$pid"
}

# start_nbdkit NAME [nbdkit options and plugin keys...]: serves the plugin
# on $tmpdir/NAME.sock, logs to $tmpdir/NAME.log; sets $sock, $pid, $uri.
start_nbdkit () {
  name=$1; shift
  sock=$tmpdir/$name.sock
  rm -f "$sock" "$tmpdir/$name.pid"
  env $(sanitizer_env) nbdkit -f -U "$sock" -P "$tmpdir/$name.pid" \
    "$@" >"$tmpdir/$name.log" 2>&1 &
  pid=$!
  nbdkit_pids="$nbdkit_pids $pid"
  uri="nbd+unix:///?socket=$sock"
  wait_started test -s "$tmpdir/$name.pid" && return 0
  diag "nbdkit $* did not start:"; diag "$(cat "$tmpdir/$name.log")"
  return 1
}

# sigstop PID: SIGSTOP, and wait until every thread of PID has stopped.
# kill returns once the signal is queued, and one thread of the group
# must run to stop the others: under load another thread can still
# answer a request for some milliseconds (seen: an upstream "stopped"
# that answered a flush 3 ms later).  Fails after 10 s.
sigstop () {
  local t state i
  kill -STOP "$1" || return 1
  for i in $(seq 1000); do
    state=stopped
    for t in /proc/"$1"/task/*/stat; do
      # The state is the field after the ")" that ends the name.
      case $(sed 's/.*) \(.\).*/\1/' "$t" 2>/dev/null) in
        T|t|Z|X|'') ;;
        *) state=running; break ;;
      esac
    done
    [ $state = stopped ] && return 0
    sleep 0.01
  done
  diag "sigstop $1: its threads did not all stop in 10 s"
  return 1
}

# stop_nbdkit: stops the last server and fails if it did not exit cleanly
# (a sanitizer report makes the exit status non-zero).
stop_nbdkit () {
  kill "$pid" 2>/dev/null
  wait "$pid"
}
