#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""TLS (--tls, NBD_OPT_STARTTLS): X.509 and PSK with libnbd's tools;
the spec's rules for options before TLS under --tls=require (an option
too long too); close_notify on every way a connection ends; refusals;
--tls=on for plain and TLS clients alike.  Certificates and keys are
made here with certtool and psktool, as nbdkit's tests do."""
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, skip, done_testing, skip_all, need_nbd  # noqa: E402
import srvlib  # noqa: E402
from srvlib import Server, greet, send_opt, recv_opt_reply, go, closed, request  # noqa: E402

srvlib.need_server()
for tool in ("certtool", "psktool", "nbdinfo", "nbdcopy"):
    if not shutil.which(tool):
        skip_all("%s is not installed" % tool)
nbd = need_nbd()

OPT_STARTTLS = 5
REP_ACK = 1
ERR_INVALID = 0x80000003
ERR_TLS_REQD = 0x80000005
TMP = tempfile.mkdtemp(prefix="sect4k-tls.")


def certtool(*args):
    subprocess.run(["certtool"] + list(args), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_pki(name, ca_dir=None):
    """DIR with ca-cert.pem, server-cert.pem, server-key.pem and a client
    certificate (client-cert.pem, client-key.pem), as nbdkit and libnbd
    expect; with ca_dir, signed by that directory's CA instead of a new
    one."""
    d = os.path.join(TMP, name)
    os.mkdir(d)
    own_ca = ca_dir is None
    ca_dir = ca_dir or d
    if own_ca:
        with open(os.path.join(d, "ca.info"), "w") as f:
            f.write("cn = sect4k test CA %s\nca\ncert_signing_key\n" % name)
        certtool("--generate-privkey", "--outfile", os.path.join(d, "ca-key.pem"))
        certtool("--generate-self-signed", "--load-privkey",
                 os.path.join(d, "ca-key.pem"), "--template",
                 os.path.join(d, "ca.info"), "--outfile",
                 os.path.join(d, "ca-cert.pem"))
    else:
        shutil.copy(os.path.join(ca_dir, "ca-cert.pem"), d)
    for who, usage in (("server", "tls_www_server"), ("client", "tls_www_client")):
        info = os.path.join(d, who + ".info")
        with open(info, "w") as f:
            f.write("organization = sect4k test\ncn = localhost\n"
                    "dns_name = localhost\nip_address = 127.0.0.1\n"
                    "%s\nencryption_key\nsigning_key\n" % usage)
        key = os.path.join(d, who + "-key.pem")
        certtool("--generate-privkey", "--outfile", key)
        certtool("--generate-certificate", "--load-ca-certificate",
                 os.path.join(ca_dir, "ca-cert.pem"), "--load-ca-privkey",
                 os.path.join(ca_dir, "ca-key.pem"), "--load-privkey", key,
                 "--template", info, "--outfile",
                 os.path.join(d, who + "-cert.pem"))
    return d


def make_psk(name, user):
    f = os.path.join(TMP, name)
    subprocess.run(["psktool", "-u", user, "-p", f], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return f


def run(*cmd, **kw):
    return subprocess.run(list(cmd), capture_output=True, text=True,
                          timeout=60, **kw)


def tls_uri(srv, query):
    return "nbds+unix:///?socket=%s&%s" % (srv.sock, query)


def psk_uri(srv, user, keys):
    return "nbds+unix://%s@/?socket=%s&tls-psk-file=%s" % (user, srv.sock, keys)


def roundtrip(uri, what):
    """8 MiB of random data in and out through nbdcopy."""
    data = os.urandom(8 << 20)
    src, dst = os.path.join(TMP, "src"), os.path.join(TMP, "dst")
    with open(src, "wb") as f:
        f.write(data)
    a = run("nbdcopy", src, uri)
    b = run("nbdcopy", uri, dst) if a.returncode == 0 else a
    same = b.returncode == 0 and open(dst, "rb").read(len(data)) == data
    ok(same, "%s: nbdcopy writes and reads back 8 MiB (%s%s)"
       % (what, a.stderr.strip(), b.stderr.strip()))


def tls_client(srv, pki, opt_go=True):
    """A Python ssl client after STARTTLS (and NBD_OPT_GO), that tells a
    TLS end with close_notify from a truncation."""
    s = srv.connect_raw()
    greet(s)
    send_opt(s, OPT_STARTTLS)
    recv_opt_reply(s)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(os.path.join(pki, "ca-cert.pem"))
    ctx.check_hostname = False
    # Debian's Python sets this by default: an EOF without close_notify
    # would then read as a clean end.
    ctx.options &= ~getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)
    t = ctx.wrap_socket(s, suppress_ragged_eofs=False)
    if opt_go:
        go(t)
    return t


def tls_end(t, timeout=10):
    """How the server ended the TLS connection: "close_notify", or what
    happened instead."""
    t.settimeout(timeout)
    try:
        while True:
            if not t.recv(65536):
                return "close_notify"
    except ssl.SSLError as e:
        return "no close_notify (%s)" % e
    except socket.timeout:
        return "still open after %d s" % timeout
    except OSError as e:
        return "%s" % e
    finally:
        t.close()


def close_notify(pki):
    """close_notify on every way a TLS connection ends."""
    with Server("size=16M", options=["--tls=require", "--tls-certificates",
                                     pki, "--idle-timeout", "2"]) as srv:
        t = tls_client(srv, pki)
        request(t, 2)                           # NBD_CMD_DISC
        end = tls_end(t)
        ok(end == "close_notify", "TLS: after NBD_CMD_DISC, close_notify "
           "(%s)" % end)

        t = tls_client(srv, pki)
        end = "no close_notify"
        try:
            t.settimeout(10)
            t.unwrap()                  # ours, then waits for the server's
            end = "close_notify"
        except (ssl.SSLError, OSError) as e:
            end = "%s" % e
        t.close()
        ok(end == "close_notify", "TLS: a client's close_notify without "
           "NBD_CMD_DISC is answered with close_notify (%s)" % end)

        t = tls_client(srv, pki)
        socket.socket(fileno=os.dup(t.fileno())).shutdown(socket.SHUT_WR)
        end = tls_end(t)
        ok(end == "close_notify", "TLS: a client gone without NBD_CMD_DISC "
           "(half-closed): close_notify (%s)" % end)

        t = tls_client(srv, pki)
        t0 = time.monotonic()
        end = tls_end(t)
        ok(end == "close_notify", "TLS: --idle-timeout: close_notify after "
           "%.1f s (%s)" % (time.monotonic() - t0, end))

        t = tls_client(srv, pki)
        u = tls_client(srv, pki, opt_go=False)
        srv.proc.send_signal(15)
        end, endu = tls_end(t), tls_end(u)
        ok(end == "close_notify", "TLS: server shutdown (SIGTERM): "
           "close_notify (%s)" % end)
        ok(endu == "close_notify", "TLS: server shutdown, a client still "
           "negotiating options: close_notify (%s)" % endu)
        ok(srv.stop() == 0, "... and the server exits 0")


def main():
    pki = make_pki("pki")
    close_notify(pki)
    keys = make_psk("keys.psk", "alice")

    # ---- X.509, --tls=require -------------------------------------------
    with Server("size=64M", options=["--tls=require", "--tls-certificates", pki,
                                     "-v", "--threads", "1",
                                     "--handshake-timeout", "2"]) as srv:
        r = run("nbdinfo", tls_uri(srv, "tls-certificates=" + pki))
        ok(r.returncode == 0 and "with TLS" in r.stdout and "67108864" in r.stdout,
           "X.509: nbdinfo over nbds:// (%s)" % r.stderr.strip())
        roundtrip(tls_uri(srv, "tls-certificates=" + pki), "X.509")

        r = run("nbdinfo", srv.uri)
        ok(r.returncode != 0, "--tls=require: a plain libnbd client is refused "
           "(%s)" % r.stderr.strip())
        ok("requires TLS" in srv.log(), "... and the server says why")

        # A hostile client: STARTTLS, half a ClientHello, then nothing.
        # The one loop thread serves others meanwhile.
        s = srv.connect_raw()
        greet(s)
        send_opt(s, OPT_STARTTLS)
        recv_opt_reply(s)
        s.sendall(bytes.fromhex("16030100c8010000c40303") + os.urandom(20))
        r = run("nbdinfo", "--size", tls_uri(srv, "tls-certificates=" + pki))
        ok(r.returncode == 0 and r.stdout.strip() == str(64 << 20),
           "a client stalled mid-handshake does not stop another being served")
        ok(closed(s, 20), "... and the stalled one is dropped at the handshake "
           "timeout")
        r = run("nbdinfo", "--size", tls_uri(srv, "tls-certificates=" + pki))
        ok(r.returncode == 0, "... the server still serves after it")

    other = make_pki("other")
    # libnbd checks the server's certificate against a host name: TCP.
    with Server("size=64M", tcp=True,
                options=["--tls=require", "--tls-certificates", pki]) as srv:
        uri = "nbds://localhost:%d/?tls-certificates=" % srv.port
        r = run("nbdinfo", "--size", uri + pki)
        ok(r.returncode == 0, "X.509 over TCP (%s)" % r.stderr.strip())
        r = run("nbdinfo", "--size", uri + other)
        ok(r.returncode != 0, "a server certificate the client does not trust: "
           "refused (%s)" % r.stderr.strip().splitlines()[-1:])

    # ---- --tls-verify-peer ----------------------------------------------
    nocert = os.path.join(TMP, "nocert")
    os.mkdir(nocert)
    shutil.copy(os.path.join(pki, "ca-cert.pem"), nocert)
    foreign = os.path.join(TMP, "foreign")
    os.mkdir(foreign)
    shutil.copy(os.path.join(pki, "ca-cert.pem"), foreign)
    for f in ("client-cert.pem", "client-key.pem"):
        shutil.copy(os.path.join(other, f), foreign)
    with Server("size=64M", options=["--tls=require", "--tls-certificates", pki,
                                     "--tls-verify-peer"]) as srv:
        r = run("nbdinfo", "--size", tls_uri(srv, "tls-certificates=" + pki))
        ok(r.returncode == 0, "--tls-verify-peer: a client with a certificate "
           "of the CA is served (%s)" % r.stderr.strip())
        r = run("nbdinfo", "--size", tls_uri(srv, "tls-certificates=" + nocert))
        ok(r.returncode != 0, "--tls-verify-peer: a client without a "
           "certificate is refused")
        r = run("nbdinfo", "--size", tls_uri(srv, "tls-certificates=" + foreign))
        ok(r.returncode != 0, "--tls-verify-peer: a client certificate of "
           "another CA is refused")

        # The spec's rules, on a raw socket.
        s = srv.connect_raw()
        greet(s)
        send_opt(s, 8)                          # STRUCTURED_REPLY
        o, typ, d = recv_opt_reply(s)
        ok(typ == ERR_TLS_REQD, "an option before STARTTLS: NBD_REP_ERR_TLS_REQD "
           "(%#x)" % typ)
        reps = go(s)
        ok(reps[-1][0] == ERR_TLS_REQD, "NBD_OPT_GO before STARTTLS: "
           "NBD_REP_ERR_TLS_REQD (%#x)" % reps[-1][0])
        send_opt(s, 8, bytes(64 << 10))         # over 16 KiB: discarded
        o, typ, d = recv_opt_reply(s)
        ok(typ == ERR_TLS_REQD, "an option of 64 KiB before STARTTLS: "
           "NBD_REP_ERR_TLS_REQD, not TOO_BIG (%#x)" % typ)
        send_opt(s, OPT_STARTTLS, b"x")
        o, typ, d = recv_opt_reply(s)
        ok(typ == ERR_INVALID, "STARTTLS with data: NBD_REP_ERR_INVALID")
        send_opt(s, 1, b"")                     # EXPORT_NAME
        ok(closed(s), "NBD_OPT_EXPORT_NAME before STARTTLS: the server closes")
        s = srv.connect_raw()
        greet(s)
        send_opt(s, OPT_STARTTLS)
        o, typ, d = recv_opt_reply(s)
        ok(o == OPT_STARTTLS and typ == REP_ACK, "STARTTLS: acknowledged")
        s.close()

        # STARTTLS again once TLS is on, and structured replies forgotten.
        h = nbd.NBD()
        h.set_tls(nbd.TLS_REQUIRE)
        h.set_tls_certificates(pki)
        h.set_opt_mode(True)
        h.connect_unix(srv.sock)
        h.opt_go()
        ok(h.get_tls_negotiated(), "nbdsh: TLS negotiated")
        buf = h.pread(4096, 1 << 20)
        h.pwrite(b"\x5a" * 4096, 0)
        ok(h.pread(4096, 0) == b"\x5a" * 4096 and len(buf) == 4096,
           "nbdsh: a write and a read over TLS")
        h.shutdown()

    # ---- PSK ----------------------------------------------------------------
    with Server("size=64M", options=["--tls=require", "--tls-psk", keys]) as srv:
        r = run("nbdinfo", "--size", psk_uri(srv, "alice", keys))
        ok(r.returncode == 0 and r.stdout.strip() == str(64 << 20),
           "PSK: nbdinfo over nbds:// (%s)" % r.stderr.strip())
        roundtrip(psk_uri(srv, "alice", keys), "PSK")
        wrong = make_psk("wrong.psk", "alice")
        r = run("nbdinfo", "--size", psk_uri(srv, "alice", wrong))
        ok(r.returncode != 0, "PSK: a wrong key is refused")
        r = run("nbdinfo", "--size", psk_uri(srv, "bob", wrong))
        ok(r.returncode != 0, "PSK: an unknown user is refused")
        ok("TLS handshake failed" in srv.log(), "... and the server logs it")

    # ---- --tls=on: both kinds of client -----------------------------------
    with Server("size=64M", options=["--tls=on", "--tls-certificates", pki]) as srv:
        r = run("nbdinfo", srv.uri)
        ok(r.returncode == 0 and "without TLS" in r.stdout,
           "--tls=on: a plain client is served (%s)" % r.stderr.strip())
        r = run("nbdinfo", tls_uri(srv, "tls-certificates=" + pki))
        ok(r.returncode == 0 and "with TLS" in r.stdout,
           "--tls=on: a TLS client is served (%s)" % r.stderr.strip())

        # STARTTLS forgets what was negotiated; a second one is invalid.
        s = srv.connect_raw()
        greet(s)
        send_opt(s, 8)                          # STRUCTURED_REPLY, in clear
        ok(recv_opt_reply(s)[1] == REP_ACK, "--tls=on: options before TLS "
           "are served")
        send_opt(s, OPT_STARTTLS)
        recv_opt_reply(s)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(os.path.join(pki, "ca-cert.pem"))
        ctx.check_hostname = False
        t = ctx.wrap_socket(s)
        meta = struct.pack(">I", 0) + struct.pack(">I", 1) + \
            struct.pack(">I", 15) + b"base:allocation"
        send_opt(t, 10, meta)                   # SET_META_CONTEXT
        o, typ, d = recv_opt_reply(t)
        ok(typ == ERR_INVALID, "after STARTTLS, structured replies are "
           "forgotten (%#x %s)" % (typ, d))
        send_opt(t, OPT_STARTTLS)
        o, typ, d = recv_opt_reply(t)
        ok(typ == ERR_INVALID, "STARTTLS over TLS: NBD_REP_ERR_INVALID")
        reps = go(t)
        ok(reps[-1][0] == REP_ACK, "... and the session goes on: NBD_OPT_GO")
        t.close()

        if shutil.which("qemu-io"):
            r = run("qemu-io", "--object", "tls-creds-x509,id=tls0,dir=%s,"
                    "endpoint=client" % pki, "--image-opts",
                    "driver=nbd,server.type=unix,server.path=%s,tls-creds=tls0,tls-hostname=localhost"
                    % srv.sock, "-c", "write -P 0x3c 4096 8192",
                    "-c", "read -P 0x3c 4096 8192")
            ok(r.returncode == 0 and "Pattern verification failed"
               not in r.stdout, "qemu-io over TLS (X.509): write and read "
               "back (%s%s)" % (r.stdout.strip()[-200:], r.stderr.strip()))
        else:
            skip("qemu-io over TLS", "qemu-io is not installed")

    # ---- an nbds:// upstream ----------------------------------------------
    if shutil.which("nbdkit"):
        sock = os.path.join(TMP, "up.sock")
        up = subprocess.Popen(["nbdkit", "-f", "-U", sock, "--tls=require",
                               "--tls-certificates", pki, "memory", "64M"],
                              stderr=subprocess.PIPE)
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        upuri = "nbds+unix:///?socket=%s&tls-certificates=%s" % (sock, pki)
        with Server("size=64M", "model=512e", "upstream=" + upuri) as srv:
            roundtrip(srv.uri, "upstream=nbds+unix:// (nbdkit --tls=require)")
            r = run("nbdinfo", "--size", upuri)
            ok(r.returncode == 0, "... nbdkit serves TLS itself")
        up.terminate()
        up.wait()
    else:
        skip("an nbds:// upstream", "nbdkit is not installed")

    # ---- --tls=off (the default): STARTTLS unsupported --------------------
    with Server("size=16M") as srv:
        r = run("nbdinfo", tls_uri(srv, "tls-certificates=" + pki))
        ok(r.returncode != 0, "no --tls: a client requiring TLS gets no TLS")

    # ---- bad options: one line each ---------------------------------------
    for opts, what in (
            (["--tls=require", "--tls-certificates", os.path.join(TMP, "none")],
             "a missing certificate directory"),
            (["--tls=require", "--tls-psk", os.path.join(TMP, "none.psk")],
             "a missing PSK file"),
            (["--tls=require", "--tls-psk", keys, "--tls-verify-peer"],
             "--tls-verify-peer without certificates"),
            (["--tls=require"], "--tls=require without credentials"),
            (["--tls=maybe", "--tls-psk", keys], "--tls=maybe"),
            (["--tls-psk", keys], "--tls-psk without --tls")):
        r = run(srvlib.SERVER, "--unix", os.path.join(TMP, "x.sock"), *opts,
                "size=1M")
        lines = r.stderr.strip().splitlines()
        ok(r.returncode == 1 and len(lines) == 1,
           "%s: exit 1, one line (%d: %s)" % (what, r.returncode, lines))


main()
shutil.rmtree(TMP, ignore_errors=True)
done_testing()
