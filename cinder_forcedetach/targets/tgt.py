"""iSCSI target on Linux ``tgtd``, driven through ``tgtadm``.

``tgt-admin`` is not used: on an in-use target with an initiator ACL its
``--force --delete`` leaves target and session alive.  ``tgtadm`` exits 22
for every error, so "already gone" is recognised by its message, and exit
107 (daemon unreachable) is always a failure.
"""

import re

from oslo_concurrency import lockutils
from oslo_log import log as logging
from oslo_utils import strutils

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
DAEMON_DOWN_RC = 107
BACKING_LUN = 1

_TARGET_RE = re.compile(r'^Target (\d+): (\S+)$')


def parse_targets(output):
    """Parse ``tgtadm --op show --mode target`` into TargetState objects."""
    targets = {}
    current = section = session = None
    for raw in output.splitlines():
        line = raw.strip()
        if not line:
            continue
        match = _TARGET_RE.match(raw)
        if match:
            current = base.TargetState(tid=int(match.group(1)),
                                       name=match.group(2))
            targets[current.name] = current
            section = session = None
            continue
        if current is None:
            continue
        if line.endswith('information:'):
            section = line[:-len(' information:')]
            continue
        if section == 'I_T nexus':
            if line.startswith('I_T nexus:'):
                session = base.Session(sid=int(line.split(':')[1]),
                                       initiator='', connections=[])
                current.sessions.append(session)
            elif line.startswith('Initiator:') and session:
                session.initiator = line.split()[1]
            elif line.startswith('Connection:') and session:
                session.connections.append(int(line.split(':')[1]))
        elif section == 'LUN' and line.startswith('LUN:'):
            current.luns.append(int(line.split(':')[1]))
        elif section == 'Account':
            current.accounts.append(line.split()[0])
        elif section == 'ACL':
            current.acls.append(line)
    return targets


class TgtAdm(base.ExportTarget):
    """Exports volumes through one ``tgtd`` instance."""

    def __init__(self, control_port=0, run=privileged_tgt.tgtadm):
        self.control_port = control_port
        self._run = run

    # -- plumbing --------------------------------------------------------

    def _tgtadm(self, *args, ignore_gone=False, ignore_exists=False):
        args = ('-C', str(self.control_port), '--lld', 'iscsi') + args
        LOG.debug('tgtadm %s', strutils.mask_password(' '.join(args)))
        code, out, err = self._run(args)
        if code == 0:
            return out
        message = (err or '').strip()
        op = ' '.join(args[4:8])
        if code == DAEMON_DOWN_RC or (
                'Transport endpoint is not connected' in message):
            raise exception.TargetDaemonUnavailable(
                reason='tgtd on control port %s: %s' % (
                    self.control_port, message))
        if ignore_gone and any(m in message for m in GONE_MESSAGES):
            LOG.debug('tgtadm %s: already gone (%s)', op, message)
            return ''
        if ignore_exists and EXISTS_MARKER in message:
            return ''
        raise exception.TargetCommandFailed(command=op, reason=message)

    def list_targets(self):
        """All targets the daemon has, keyed by target name."""
        return parse_targets(self._tgtadm('--op', 'show', '--mode', 'target'))

    def find(self, name):
        return self.list_targets().get(name)

    # -- export ----------------------------------------------------------

    def export(self, name, path, username=None, password=None):
        with lockutils.lock('tgt-tid-%s' % self.control_port, external=True,
                            lock_file_prefix='cinder-forcedetach-'):
            targets = self.list_targets()
            state = targets.get(name)
            if state is None:
                tid = max([t.tid for t in targets.values()] or [0]) + 1
                self._tgtadm('--op', 'new', '--mode', 'target', '--tid',
                             str(tid), '--targetname', name)
                state = base.TargetState(tid=tid, name=name)
        if BACKING_LUN not in state.luns:
            self._tgtadm('--op', 'new', '--mode', 'logicalunit', '--tid',
                         str(state.tid), '--lun', str(BACKING_LUN),
                         '--backing-store', path, ignore_exists=True)
            state.luns.append(BACKING_LUN)
        if username and username not in state.accounts:
            self._tgtadm('--op', 'new', '--mode', 'account', '--user',
                         username, '--password', password, ignore_exists=True)
            self._tgtadm('--op', 'bind', '--mode', 'account', '--tid',
                         str(state.tid), '--user', username,
                         ignore_exists=True)
            state.accounts.append(username)
        return state

    def grant(self, name, initiator):
        state = self._require(name)
        if initiator not in state.acls:
            self._tgtadm('--op', 'bind', '--mode', 'target', '--tid',
                         str(state.tid), '--initiator-name', initiator,
                         ignore_exists=True)

    def _require(self, name):
        state = self.find(name)
        if state is None:
            raise exception.TargetCommandFailed(
                command='grant', reason="can't find the target %s" % name)
        return state

    # -- teardown --------------------------------------------------------

    def _revoke_state(self, state, initiators):
        """Unbind ACLs first so a reconnect is refused, then drop sessions."""
        for initiator in initiators:
            if initiator in state.acls:
                self._tgtadm('--op', 'unbind', '--mode', 'target', '--tid',
                             str(state.tid), '--initiator-name', initiator,
                             ignore_gone=True)
                state.acls.remove(initiator)
        for session in [s for s in state.sessions
                        if s.initiator in initiators]:
            for cid in session.connections or [0]:
                self._tgtadm('--op', 'delete', '--mode', 'conn', '--tid',
                             str(state.tid), '--sid', str(session.sid),
                             '--cid', str(cid), ignore_gone=True)
            state.sessions.remove(session)

    def revoke(self, name, initiators=None):
        state = self.find(name)
        if state is None:
            return []
        if initiators is None:
            initiators = state.initiators
        self._revoke_state(state, list(initiators))
        return list(state.acls)

    def unexport(self, name):
        state = self.find(name)
        if state is None:
            LOG.debug('Target %s already removed.', name)
            return
        self._revoke_state(state, state.initiators)
        # --force also removes the LUNs (and a session that raced in).
        self._tgtadm('--op', 'delete', '--mode', 'target', '--tid',
                     str(state.tid), '--force', ignore_gone=True)
        for account in state.accounts:
            self._tgtadm('--op', 'delete', '--mode', 'account', '--user',
                         account, ignore_gone=True)

    def delete_account(self, username):
        """Remove a CHAP account that may be left from an interrupted run."""
        self._tgtadm('--op', 'delete', '--mode', 'account', '--user',
                     username, ignore_gone=True)
