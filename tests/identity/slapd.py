"""A throwaway OpenLDAP server (Debian's `slapd`) for the LDAP group sync tests (issue 37).

Started as the current user with a slapd.conf of its own in a temporary directory: one mdb
database for `dc=example,dc=org`, listening only on loopback (ldap:// with StartTLS and
ldaps://, certificates from a CA made for the run), loaded with people and groups by
`slapadd` before it starts. Changes go through `ldapmodify` (ldap-utils) as the root DN,
so the code under test (ldap3) is not also the tool that prepares what it reads.
`make test` installs both packages; a server that cannot start fails the tests with its
reason and the tail of its log, it never skips them.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from cli.certs import make_certificates

SLAPD = Path("/usr/sbin/slapd")
SCHEMA = Path("/etc/ldap/schema")
MODULES = Path("/usr/lib/ldap")
SUFFIX = "dc=example,dc=org"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
ROOT_DN = f"cn=admin,{SUFFIX}"
READER_DN = f"cn=reader,{SUFFIX}"
USERS = ("alice", "bob", "carol", "dana")
LOOKALIKE_UID = "\u212aarl"  # KELVIN SIGN + "arl": lower-cases to "karl"


class SlapdUnavailable(RuntimeError):
    """slapd is absent or did not start; the message says why (with its log's tail)."""


def user_dn(uid: str) -> str:
    return f"uid={uid},{PEOPLE}"


def group_dn(cn: str) -> str:
    return f"cn={cn},{GROUPS}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entries() -> str:
    """The directory: four people, a look-alike, a service outside people, plain groups,
    a nested group and a membership cycle."""
    out = [
        f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example",
        f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people",
        f"dn: {GROUPS}\nobjectClass: organizationalUnit\nou: groups",
        f"dn: ou=services,{SUFFIX}\nobjectClass: organizationalUnit\nou: services",
        f"dn: {READER_DN}\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\n"
        "cn: reader\nuserPassword: reader-secret",
        f"dn: cn=backup,ou=services,{SUFFIX}\nobjectClass: organizationalRole\ncn: backup",
    ]
    for uid in USERS:
        out.append(
            f"dn: {user_dn(uid)}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid.title()}\n"
            f"sn: {uid.title()}\nuserPassword: {uid}-password"
        )
    # LDIF carries non-ASCII values base64-encoded (`attr:: ...`)
    b64 = base64.b64encode(f"uid={LOOKALIKE_UID},{PEOPLE}".encode()).decode()
    b64uid = base64.b64encode(LOOKALIKE_UID.encode()).decode()
    out.append(f"dn:: {b64}\nobjectClass: inetOrgPerson\nuid:: {b64uid}\ncn: Karl\nsn: Karl")

    def group(cn: str, *members: str) -> str:
        return f"dn: {group_dn(cn)}\nobjectClass: groupOfNames\ncn: {cn}\n" + "\n".join(
            f"member: {m}" for m in members
        )

    out += [
        group("analysts", user_dn("alice"), user_dn("bob")),
        group("emea-analysts", user_dn("carol")),
        group("pii-readers", user_dn("dana")),
        group("all-analysts", group_dn("analysts"), group_dn("emea-analysts")),
        group("cycle-a", group_dn("cycle-b"), user_dn("alice")),
        group("cycle-b", group_dn("cycle-a"), user_dn("dana")),
        # a service account (no uid) and a look-alike: both skipped, bob kept
        group("ops", user_dn("bob"), f"cn=backup,ou=services,{SUFFIX}") + f"\nmember:: {b64}",
    ]
    return "\n\n".join(out) + "\n"


class Slapd:
    """One slapd process over a directory of its own; `stop()`/`start()` keep the data and
    the ports, so a test can make the directory unreachable and bring it back."""

    def __init__(self, root: Path) -> None:
        if not SLAPD.exists() or shutil.which("slapadd", path="/usr/sbin:/usr/bin") is None:
            raise SlapdUnavailable(
                f"{SLAPD} or slapadd is not installed (`make test` installs Debian's slapd "
                "and ldap-utils)"
            )
        self.root = root
        self.port = _free_port()
        self.tls_port = _free_port()
        self.url = f"ldap://127.0.0.1:{self.port}"
        self.ldaps_url = f"ldaps://127.0.0.1:{self.tls_port}"
        self.bind_dn = READER_DN
        self.password = "reader-secret"
        self.root_password = "admin-secret"
        self.certs = make_certificates(root / "tls", ["127.0.0.1", "localhost"], 1)
        self.ca_file = self.certs["ca"]
        self.log = root / "slapd.log"
        self.conf = root / "slapd.conf"
        self._proc: subprocess.Popen[bytes] | None = None
        (root / "db").mkdir(mode=0o700)
        self.conf.write_text(self._config())
        ldif = root / "data.ldif"
        ldif.write_text(_entries(), encoding="utf-8")
        loaded = subprocess.run(
            ["slapadd", "-f", str(self.conf), "-l", str(ldif)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if loaded.returncode != 0:
            raise SlapdUnavailable(f"slapadd failed: {loaded.stderr.strip()[-2000:]}")

    def _config(self) -> str:
        schemas = ("core", "cosine", "inetorgperson")
        modules = f"modulepath {MODULES}\nmoduleload back_mdb\n" if MODULES.exists() else ""
        return (
            "".join(f"include {SCHEMA / s}.schema\n" for s in schemas)
            + modules
            + f"pidfile {self.root / 'slapd.pid'}\n"
            + f"argsfile {self.root / 'slapd.args'}\n"
            + f"TLSCACertificateFile {self.certs['ca']}\n"
            + f"TLSCertificateFile {self.certs['cert']}\n"
            + f"TLSCertificateKeyFile {self.certs['key']}\n"
            + "database mdb\n"
            + f'suffix "{SUFFIX}"\n'
            + f'rootdn "{ROOT_DN}"\n'
            + f"rootpw {self.root_password}\n"
            + f"directory {self.root / 'db'}\n"
            + "maxsize 67108864\ndbnosync\n"  # a throwaway database: no fsync per write
            # paged searches page by 500 (slapd's default size limit) but may read everything;
            # without this a sync of more than 500 groups is refused (sizeLimitExceeded)
            + f'limits dn.exact="{READER_DN}" size.pr=500 size.prtotal=unlimited\n'
            # the reader reads, nobody else sees anything; passwords only for binding
            + "access to attrs=userPassword by anonymous auth by * none\n"
            + f'access to * by dn.exact="{READER_DN}" read by * none\n'
        )

    def start(self) -> None:
        """Start slapd and wait until it answers; SlapdUnavailable with the log's tail if not."""
        if self._proc is not None:
            return
        log = self.log.open("ab")
        self._proc = subprocess.Popen(
            [
                str(SLAPD),
                "-f",
                str(self.conf),
                "-h",
                f"{self.url}/ {self.ldaps_url}/",
                "-d",
                "256",  # stats: connections and operations, to the log; stays in front
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise SlapdUnavailable(f"slapd exited with {code}: {self.log_tail()}")
            if self._answers():
                return
            time.sleep(0.05)
        self.stop()
        raise SlapdUnavailable(f"slapd did not answer within 20 s: {self.log_tail()}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                pass
            with socket.create_connection(("127.0.0.1", self.tls_port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        """Stop slapd (the directory becomes unreachable); the data stays for `start()`."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def modify(self, ldif: str) -> None:
        """Apply an LDIF change as the root DN with ldapmodify."""
        done = subprocess.run(
            ["ldapmodify", "-x", "-H", self.url, "-D", ROOT_DN, "-y", str(self._root_pw_file())],
            input=ldif,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode != 0:
            raise RuntimeError(f"ldapmodify failed: {done.stderr.strip()}")

    def _root_pw_file(self) -> Path:
        path = self.root / "root.pw"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(self.root_password)  # -y reads the whole file: no newline
        return path

    def add_member(self, group: str, member_dn: str) -> None:
        self.modify(
            f"dn: {group_dn(group)}\nchangetype: modify\nadd: member\nmember: {member_dn}\n"
        )

    def remove_member(self, group: str, member_dn: str) -> None:
        self.modify(
            f"dn: {group_dn(group)}\nchangetype: modify\ndelete: member\nmember: {member_dn}\n"
        )

    def add_group(self, cn: str, *member_dns: str) -> None:
        members = "".join(f"member: {m}\n" for m in member_dns)
        self.modify(
            f"dn: {group_dn(cn)}\nchangetype: add\nobjectClass: groupOfNames\ncn: {cn}\n{members}"
        )

    def delete(self, dn: str) -> None:
        self.modify(f"dn: {dn}\nchangetype: delete\n")
