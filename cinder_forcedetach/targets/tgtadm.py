#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""iSCSI target on Linux ``tgtd``, driven through ``tgtadm``.

``tgt-admin`` is not used: on an in-use target with an initiator ACL its
``--force --delete`` leaves target and session alive.  ``tgtadm`` exits 22
for every error, so "already gone" is recognised by its message, and exit
107 (daemon unreachable) is always a failure.

What tgtd 1.0.85 can show of one target, and what each operation reads:

* ``--op show --mode target`` lists every target with its LUNs, sessions,
  CHAP accounts and ACL: the only place ACL entries are shown.  Its size
  grows with the targets on the daemon (~1.2 KB each), so only what needs
  a target's ACL reads it (:meth:`TgtAdm.find`: a grant, the revocation of
  one host, the audit, the fallback of ``remove_export``).
* ``--op show --mode lld`` lists each target's tid and name only (~90
  bytes each, names set by root): how the teardown finds the tid of a
  target and checks its name (:meth:`TgtAdm.tid_of`).  Nothing per target
  shows the name (``--op show --mode target --tid T`` prints only its
  iSCSI parameters), so no tid is remembered: a tid freed by a delete is
  reused by the next target made, possibly another volume's.
* ``--op show --mode conn --tid T`` lists one target's sessions and
  connections (the initiator name as the initiator sent it).
* ``--op update --mode target --tid T --name state --value offline``:
  tgtd then refuses every login to the target and every command on its
  sessions, whatever its ACL says: what revoking every host does first,
  as the ACL entries it cannot read must not let anyone back in.
"""

import dataclasses
import ipaddress
import re
import time
import types
from typing import cast, Iterable, NoReturn, Optional

from oslo_concurrency import lockutils
from oslo_log import log as logging

from cinder_forcedetach import connector_grammar
from cinder_forcedetach import exception
from cinder_forcedetach.privileged import tgt as privileged_tgt
from cinder_forcedetach.targets import base

LOG = logging.getLogger(__name__)

# Messages tgtadm prints when the object of a removal does not exist.
GONE_MESSAGES = (
    "can't find the target",
    "can't find the logical unit",
    "this access control rule does not exist",
    "can't find the session",
    "can't find the connection",
    "can't find the account",
)
EXISTS_MARKER = 'already exists'
# "this target is still active", "this logical unit is still active": a
# LUN with commands in flight cannot be deleted yet.
ACTIVE_MARKER = 'is still active'
DAEMON_DOWN_RC = 107
BACKING_LUN = 1
# Seconds between the attempts to delete a target whose LUN still has
# commands in flight (the target is offline by then: no new ones come).
DELETE_RETRY_DELAYS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)

_TARGET_RE = re.compile(r'^Target (\d+): (\S+)$')
# Initiator names are not addresses (saves a failed ip_network parse).
_NAME_PREFIXES = ('iqn.', 'eui.', 'naa.')


def _is_address_acl(entry: str) -> bool:
    """Whether an ACL entry is an address rule (``ALL``, IP, network)."""
    if entry == 'ALL':
        return True
    if entry[:4].lower() in _NAME_PREFIXES:
        return False
    try:
        ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False
    return True


# tgtd prints these sections for every target, once each, in this order.
SECTIONS = ('System', 'I_T nexus', 'LUN', 'Account', 'ACL')


def _check_sections(state: Optional[base.TargetState],
                    sections: Iterable[str]) -> None:
    if state is not None and tuple(sections) != SECTIONS:
        raise exception.TargetCommandFailed(
            command='show', reason='target %r is listed with sections %s, '
            'not %s: the listing is ambiguous' % (
                state.name, ', '.join(sections), ', '.join(SECTIONS)))


# Line boundaries str.splitlines knows besides \n.
_OTHER_BREAKS = '\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029'
# The lines that count, at exactly tgtd's indentation (a line matching
# none of these is ignored): target headers, section headers (4 spaces),
# entries (8) and a session's Initiator/Connection sub-entries (12).
_LINE_RE = re.compile(
    r'^(?:Target (?P<tid>\d+): (?P<name>\S+)'
    r'|    (?P<section>\S.*) information:'
    r'|        (?P<entry>\S.*)'
    r'|            (?P<key>Initiator|Connection): (?P<value>.*))$',
    re.MULTILINE)


@dataclasses.dataclass
class TgtTargetState(base.TargetState):
    """A tgt target; *ready*: False when it is offline (nobody gets in)."""

    ready: bool = True


def is_ready(state: base.TargetState) -> bool:
    """Whether tgtd lets initiators in (and their commands through)."""
    return getattr(state, 'ready', True)


class _Reader(object):
    """The target being read, line by line."""

    def __init__(self, tid: int, name: str) -> None:
        self.state = TgtTargetState(tid=tid, name=name)
        self.sections: list[str] = []
        self.section: Optional[str] = None
        self.session: Optional[base.Session] = None
        self.state_read = False

    def header(self, section: str) -> None:
        self.section = section
        self.sections.append(section)
        self.session = None

    def entry(self, text: str) -> None:
        state, section = self.state, self.section
        if section == 'System':
            if text.startswith('State:') and not self.state_read:
                self.state_read = True
                state.ready = text.split(':', 1)[1].strip() == 'ready'
        elif section == 'I_T nexus':
            if text.startswith('I_T nexus:'):
                self.session = base.Session(
                    sid=int(text.split(':', 1)[1]), initiator='',
                    connections=[])
                state.sessions.append(self.session)
        elif section == 'LUN':
            if text.startswith('LUN:'):
                state.luns.append(int(text.split(':', 1)[1]))
        elif section == 'Account':
            state.accounts.append(text.split()[0])
        elif section == 'ACL':
            if _is_address_acl(text):
                state.address_acls.append(text)
            else:
                state.acls.append(text)

    def sub_entry(self, key: str, value: str) -> None:
        session = self.session
        if session is None or self.section != 'I_T nexus':
            return
        if key == 'Initiator' and not session.initiator:
            session.initiator = value.split(' ', 1)[0]
        elif key == 'Connection' and value.isdigit():
            session.connections.append(int(value))

    def done(self) -> TgtTargetState:
        _check_sections(self.state, self.sections)
        return self.state


def parse_targets(output: str, only: Optional[str] = None
                  ) -> dict[str, TgtTargetState]:
    """Parse ``tgtadm --op show --mode target`` into TargetState objects.

    An initiator controls the name and alias it logs in with, which tgtd
    prints as is, inside the target's I_T nexus section: a newline there
    could forge any line.  So only lines at the indentation tgtd gives
    them count (section headers 4 spaces, entries 8, sub-entries 12, each
    followed by a non-blank), a name is the first word of its line, and a
    listing that names a target or tid twice, or whose target does not
    have tgtd's five sections in order, is refused rather than guessed at.
    Lines are cut as ``str.splitlines`` cuts them; one pass, target by
    target, over the lines that count only.

    :param only: parse just this target (every header is still checked).
    """
    if any(brk in output for brk in _OTHER_BREAKS):
        output = '\n'.join(output.splitlines())
    targets: dict[str, TgtTargetState] = {}
    names: set[str] = set()
    tids: set[int] = set()
    reader: Optional[_Reader] = None
    for match in _LINE_RE.finditer(output):
        tid, name, section, entry, key, value = match.groups()
        if name is not None:
            if reader is not None:
                targets[reader.state.name] = reader.done()
            tid = int(tid)
            if name in names or tid in tids:
                raise exception.TargetCommandFailed(
                    command='show', reason='target %r or tid %d is listed '
                    'twice: the listing is ambiguous' % (name, tid))
            names.add(name)
            tids.add(tid)
            reader = (_Reader(tid, name) if only is None or name == only
                      else None)
        elif reader is None:
            continue
        elif entry is not None:
            reader.entry(entry)
        elif section is not None:
            reader.header(section)
        else:
            reader.sub_entry(key, value)
    if reader is not None:
        targets[reader.state.name] = reader.done()
    return targets


def _ambiguous(what: str, reason: str) -> exception.TargetCommandFailed:
    return exception.TargetCommandFailed(
        command='show', reason='%s: %s: the listing is ambiguous' % (
            what, reason))


def _lines(output: str) -> list[str]:
    """*output* cut as ``str.splitlines`` cuts it, without a last ''."""
    if any(brk in output for brk in _OTHER_BREAKS):
        output = '\n'.join(output.splitlines())
    lines = output.split('\n')
    if lines[-1] == '':
        lines.pop()
    return lines


_LLD_LINE_RE = re.compile(
    r'    (?P<lld>\S+): \S+|        Target (?P<tid>\d+): (?P<name>\S+)')
# The whole listing in tgtd's form (matched in one pass: no two of its
# line forms can match the same text, so a refusal costs no more).
_LLD_LISTING_RE = re.compile(
    r'LLDs:\n(?:    \S+: \S+\n(?:        Target \d+: \S+\n)*)*')
_LLD_TARGET_RE = re.compile(r'^        Target (\d+): (\S+)$', re.MULTILINE)


def parse_target_names(output: str) -> dict[str, int]:
    """``tgtadm --op show --mode lld`` as ``{target name: tid}``.

    tgtd prints ``LLDs:``, then each LLD (4 spaces) and its targets (8
    spaces, ``Target <tid>: <name>``).  Names are set by root, not by
    initiators, yet the listing is read as strictly as the others: a line
    of any other form, or a name or tid listed twice, is refused.  Tids
    are global: every LLD's targets count.  Read on every teardown, so
    checked and read in single passes (~90 bytes a target).
    """
    if any(brk in output for brk in _OTHER_BREAKS):
        output = '\n'.join(output.splitlines()) + '\n'
    if not _LLD_LISTING_RE.fullmatch(output):
        _refuse_target_names(output)
    pairs = _LLD_TARGET_RE.findall(output)
    names = {name: int(tid) for tid, name in pairs}
    if len(names) != len(pairs) or len(set(names.values())) != len(pairs):
        raise _ambiguous('target names', 'a target name or tid is listed '
                         'twice')
    return names


def find_tid(output: str, name: str) -> Optional[int]:
    """The tid of target *name* in a ``--mode lld`` listing, or None.

    What each teardown reads, so in a few scans in C, not line by line
    in Python: the name must end exactly one line, that line must be a
    target line in tgtd's form (8 spaces, ``Target <tid>: <name>``), and
    its tid must start exactly one target line; else the listing is
    refused, as :func:`parse_target_names` refuses it.
    """
    if any(brk in output for brk in _OTHER_BREAKS):
        output = '\n'.join(output.splitlines()) + '\n'
    if not output.startswith('LLDs:\n    ') or not output.endswith('\n'):
        _refuse_target_names(output)
    needle = ': %s\n' % name
    count = output.count(needle)
    if not count:
        return None
    end = output.find(needle)
    start = output.rfind('\n', 0, end) + 1
    match = _LLD_LINE_RE.fullmatch(output[start:end + len(needle) - 1])
    if (count > 1 or match is None or match.group('name') != name or
            output.count('\n        Target %s: ' % match.group('tid')) != 1):
        raise _ambiguous('target names', 'target %r is listed twice, or '
                         'not as a target, or its tid is' % name)
    return int(match.group('tid'))


def _refuse_target_names(output: str) -> NoReturn:
    """Why *output* is not a listing of names in tgtd's form (raises)."""
    lines = _lines(output)
    if not lines or lines[0] != 'LLDs:':
        raise _ambiguous('target names', 'it does not start with "LLDs:"')
    lld = None
    for line in lines[1:]:
        match = _LLD_LINE_RE.fullmatch(line)
        if match is None:
            raise _ambiguous('target names', 'unexpected line %r' % line)
        if match.group('lld') is not None:
            lld = match.group('lld')
        elif lld is None:
            raise _ambiguous('target names', 'target %r is listed outside '
                             'an LLD' % match.group('name'))
    raise _ambiguous('target names', 'it does not end with a line break')


# One connection, as tgtd 1.0.85 prints it: four lines, the third with the
# initiator name as the initiator sent it, the fourth the peer address
# (empty when tgtd could not read it).
_CONNECTION_RES = (re.compile(r'Session: (\d+)'),
                   re.compile(r'    Connection: (\d+)'),
                   re.compile(r'        Initiator: (.*)'),
                   re.compile(r'        (?:IP Address: \S+)?'))


def parse_connections(output: str) -> list[base.Session]:
    """``tgtadm --op show --mode conn --tid T`` as :class:`base.Session` s.

    The initiator name is the initiator's to choose, and a newline in it
    could forge lines; tgtd prints nothing else of the initiator's here.
    So the listing must be whole blocks of tgtd's four lines, each at its
    indentation, a session's connections must all name one initiator, and
    a session and connection listed twice is refused rather than guessed
    at.  Lines are cut as ``str.splitlines`` cuts them.  A forged block of
    a session that does not exist names nothing a caller could act on: a
    connection is always deleted with its target's tid, which tgtd checks.
    """
    lines = _lines(output)
    if len(lines) % len(_CONNECTION_RES):
        raise _ambiguous('connections', '%d lines are not whole blocks of '
                         '%d' % (len(lines), len(_CONNECTION_RES)))
    sessions: dict[int, base.Session] = {}
    seen: set[tuple[int, int]] = set()
    for start in range(0, len(lines), len(_CONNECTION_RES)):
        block = lines[start:start + len(_CONNECTION_RES)]
        matches = [regex.fullmatch(line)
                   for regex, line in zip(_CONNECTION_RES, block)]
        if not all(matches):
            raise _ambiguous('connections', 'unexpected block %r' % block)
        # all() does not narrow for mypy: no match is None here.
        found = cast('list[re.Match[str]]', matches)
        sid, cid = int(found[0].group(1)), int(found[1].group(1))
        initiator = found[2].group(1)
        session = sessions.get(sid)
        if (sid, cid) in seen or (
                session is not None and session.initiator != initiator):
            raise _ambiguous('connections', 'session %d connection %d is '
                             'listed twice or with two initiators' % (
                                 sid, cid))
        seen.add((sid, cid))
        if session is None:
            sessions[sid] = base.Session(sid=sid, initiator=initiator,
                                         connections=[cid])
        else:
            session.connections.append(cid)
    return list(sessions.values())


class TgtAdm(base.ExportTarget):
    """Exports volumes through one ``tgtd`` instance.

    :param ops: the privileged operations (:mod:`..privileged.tgt`); each
        takes the control port first and returns ``(code, out, err)``.
    """

    def __init__(self, control_port: int = 0,
                 ops: types.ModuleType = privileged_tgt) -> None:
        self.control_port = control_port
        self._ops = ops

    # -- plumbing --------------------------------------------------------

    def _tgtadm(self, operation: str, *args: object,
                ignore_gone: bool = False, ignore_exists: bool = False,
                secret: bool = False) -> str:
        LOG.debug('tgtadm %s %s', operation,
                  args[0] if secret else ' '.join(str(a) for a in args))
        code, out, err = getattr(self._ops, operation)(self.control_port,
                                                       *args)
        if code == 0:
            return out
        message = (err or '').strip()
        if code == DAEMON_DOWN_RC or (
                'Transport endpoint is not connected' in message):
            raise exception.TargetDaemonUnavailable(
                reason='tgtd on control port %s: %s' % (
                    self.control_port, message))
        if ignore_gone and any(m in message for m in GONE_MESSAGES):
            LOG.debug('tgtadm %s: already gone (%s)', operation, message)
            return ''
        if ignore_exists and EXISTS_MARKER in message:
            return ''
        raise exception.TargetCommandFailed(command=operation,
                                            reason=message)

    def list_targets(self) -> dict[str, TgtTargetState]:
        """All targets the daemon has, keyed by target name."""
        return parse_targets(self._tgtadm('show_targets'))

    def find(self, name: str) -> Optional[TgtTargetState]:
        """The target's whole state (reads the listing of every target)."""
        return parse_targets(self._tgtadm('show_targets'),
                             only=name).get(name)

    def target_names(self) -> dict[str, int]:
        """``{name: tid}`` of every target (a short listing)."""
        return parse_target_names(self._tgtadm('show_target_names'))

    def tid_of(self, name: str) -> Optional[int]:
        """The tid of target *name* as tgtd has it now, or None.

        Read afresh each time, never remembered: once a target is
        deleted its tid goes to the next target made, maybe by another
        volume service for another volume.  The caller acts on the tid
        under the volume's lock, which every removal of the volume's
        target holds.
        """
        return find_tid(self._tgtadm('show_target_names'), name)

    def connections(self, tid: int) -> list[base.Session]:
        """The sessions of target *tid* (none when it is gone)."""
        return parse_connections(self._tgtadm('show_connections', tid,
                                              ignore_gone=True))

    # -- export ----------------------------------------------------------

    def export(self, name: str, path: str, username: Optional[str] = None,
               password: Optional[str] = None) -> TgtTargetState:
        with lockutils.lock('tgt-tid-%s' % self.control_port, external=True,
                            lock_file_prefix='cinder-forcedetach-'):
            names = self.target_names()
            state = self.find(name) if name in names else None
            if state is None:
                tid = max(list(names.values()) + [0]) + 1
                self._tgtadm('new_target', tid, name)
                state = TgtTargetState(tid=tid, name=name)
        if BACKING_LUN not in state.luns:
            self._tgtadm('new_lun', state.tid, BACKING_LUN, path,
                         ignore_exists=True)
            state.luns.append(BACKING_LUN)
        if username and username not in state.accounts:
            self._tgtadm('new_account', username, password,
                         ignore_exists=True, secret=True)
            self._tgtadm('bind_account', state.tid, username,
                         ignore_exists=True)
            state.accounts.append(username)
        return state

    def grant(self, name: str, initiator: str,
              state: Optional[base.TargetState] = None) -> None:
        """See :meth:`base.ExportTarget.grant`.

        *state*: the target as the caller just read or made it.
        """
        state = state or self._require(name)
        if initiator not in state.acls:
            self._tgtadm('bind_initiator', state.tid, initiator,
                         ignore_exists=True)
            state.acls.append(initiator)

    def _require(self, name: str) -> TgtTargetState:
        state = self.find(name)
        if state is None:
            raise exception.TargetCommandFailed(
                command='grant', reason="can't find the target %s" % name)
        return state

    # -- teardown --------------------------------------------------------

    def _revoke_state(self, state: base.TargetState, initiators: list[str],
                      everyone: bool = False) -> None:
        """Unbind ACLs first so a reconnect is refused, then drop sessions.

        *everyone*: also the address rules (``ALL``, networks, as
        upstream's helper binds) and the sessions of any initiator name.
        """
        for initiator in initiators:
            if initiator not in state.acls:
                continue
            self._unbind_name(state, initiator)
            state.acls.remove(initiator)
        if everyone:
            for address in list(state.address_acls):
                self._tgtadm('unbind_address', state.tid, address,
                             ignore_gone=True)
                state.address_acls.remove(address)
        for session in [s for s in state.sessions
                        if everyone or s.initiator in initiators]:
            for cid in session.connections or [0]:
                self._tgtadm('delete_connection', state.tid, session.sid,
                             cid, ignore_gone=True)
            state.sessions.remove(session)

    def _unbind_name(self, state: base.TargetState,
                     initiator: str) -> None:
        if connector_grammar.is_iscsi_name(initiator):
            self._tgtadm('unbind_initiator', state.tid, initiator,
                         ignore_gone=True)
        else:
            # Cannot come from us; only removing the target removes it.
            LOG.warning('Target %(tgt)s has an ACL entry or a session of '
                        '%(acl)r, which is not an iSCSI name; it goes with '
                        'the target.', {'tgt': state.name, 'acl': initiator})

    def revoke(self, name: str, initiators: Optional[Iterable[str]] = None,
               keep: Iterable[str] = (),
               known: Iterable[str] = ()) -> list[str]:
        """See :meth:`base.ExportTarget.revoke`.

        *keep*: initiators of the attachments that stay.  Only an export
        with address rules needs them (see :meth:`_narrow`).

        Every host (*initiators* None) is revoked without reading the
        listing of every target (see :meth:`_revoke_everyone`); *known*:
        initiator names that may have an ACL entry (the volume's
        attachments), unbound along with those of the sessions.
        """
        if initiators is None:
            return self._revoke_everyone(name, known)
        state = self.find(name)
        if state is None:
            return []
        if state.address_acls:
            state = self._narrow(state, list(initiators), list(keep))
        else:
            self._revoke_state(state, list(initiators))
        if not is_ready(state):
            return []   # revoked for every host: nobody gets in
        return state.acls + state.address_acls

    def _revoke_everyone(self, name: str,
                         known: Iterable[str] = ()) -> list[str]:
        """Revoke every host, reading only this target.

        tgtd shows a target's ACL only in its listing of every target,
        whose reading costs more the more targets the daemon has.  So the
        target is first taken offline: from then on tgtd refuses every
        login to it and every command of its sessions, whatever ACL entry
        or address rule it has.  Then the ACL entries that can be named
        (the *known* initiators and those of its sessions) are unbound,
        and its sessions are closed.  It stays offline: an entry nobody
        could name (a host a reset of the state forgot, an address rule
        such as upstream's ``ALL``) stays but lets nobody in, and the
        target is removed next (``remove_export``) or made again before a
        new grant (:meth:`VolumeExports.connect`).  Returns [] (nobody
        keeps access).
        """
        tid = self.tid_of(name)
        if tid is None:
            return []
        self._tgtadm('offline_target', tid, ignore_gone=True)
        state = TgtTargetState(tid=tid, name=name, ready=False,
                               sessions=self.connections(tid))
        names = []
        for initiator in list(known) + [s.initiator for s in state.sessions]:
            if initiator not in names:
                names.append(initiator)
        for initiator in names:
            self._unbind_name(state, initiator)
        for session in state.sessions:
            for cid in session.connections:
                self._tgtadm('delete_connection', tid, session.sid, cid,
                             ignore_gone=True)
        return []

    def _narrow(self, state: TgtTargetState, initiators: list[str],
                keep: list[str]) -> TgtTargetState:
        """Replace address rules by the *keep* names, then revoke the rest.

        An address rule (``ALL``, as upstream's helper binds) admits any
        initiator name, so unbinding one name would not cut its host: the
        kept names are bound, the address rules removed, and then every
        session of an initiator that is not kept is dropped.
        """
        for initiator in keep:
            if initiator not in state.acls:
                self._tgtadm('bind_initiator', state.tid, initiator,
                             ignore_exists=True)
        for address in state.address_acls:
            self._tgtadm('unbind_address', state.tid, address,
                         ignore_gone=True)
        LOG.info('Target %(tgt)s: address rule(s) %(rules)s replaced by '
                 'the initiators Cinder keeps (%(keep)s).',
                 {'tgt': state.name, 'rules': ', '.join(state.address_acls),
                  'keep': ', '.join(keep) or 'none'})
        # Listed again: a session that logged in meanwhile is seen too.
        state = self.find(state.name) or state
        unkept = {s.initiator for s in state.sessions
                  if s.initiator not in keep}
        self._revoke_state(state, sorted(set(initiators) | unkept))
        return state

    def unexport(self, name: str, state: Optional[base.TargetState] = None,
                 accounts: Iterable[str] = ()) -> None:
        """See :meth:`base.ExportTarget.unexport`.

        *state*: the target as just read (by :meth:`find`), to save
        looking it up again; its CHAP accounts are deleted too.
        *accounts*: CHAP accounts to delete besides (the volume's own:
        they are deleted even when the target is already gone).  Without
        *state* only those are: tgtd shows which accounts a target has
        only in the listing of every target, and an account no target
        has bound lets nobody in.

        ``delete --force`` removes LUNs, sessions, ACL and account
        bindings at once, in tgtd.  It refuses while a LUN has commands
        in flight: the target is then taken offline (no new command, no
        login) and the delete tried again.
        """
        tid = state.tid if state is not None else self.tid_of(name)
        if tid is None:
            LOG.debug('Target %s already removed.', name)
        else:
            self._delete_target(tid)
        for account in dict.fromkeys(
                list(state.accounts if state is not None else ()) +
                list(accounts)):
            self._tgtadm('delete_account', account, ignore_gone=True)

    def _delete_target(self, tid: int) -> None:
        offline = False
        for delay in DELETE_RETRY_DELAYS + (None,):
            try:
                self._tgtadm('delete_target', tid, ignore_gone=True)
                return
            except exception.TargetCommandFailed as err:
                if delay is None or ACTIVE_MARKER not in str(err):
                    raise
            if not offline:
                self._tgtadm('offline_target', tid, ignore_gone=True)
                offline = True
            LOG.debug('Target %(tid)s still active; deleting it again in '
                      '%(delay)s s.', {'tid': tid, 'delay': delay})
            time.sleep(delay)

    def delete_account(self, username: str) -> None:
        """Remove a CHAP account that may be left from an interrupted run."""
        self._tgtadm('delete_account', username, ignore_gone=True)
