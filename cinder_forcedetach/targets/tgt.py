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
"""

import ipaddress
import re

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
DAEMON_DOWN_RC = 107
BACKING_LUN = 1

_TARGET_RE = re.compile(r'^Target (\d+): (\S+)$')
# Initiator names are not addresses (saves a failed ip_network parse).
_NAME_PREFIXES = ('iqn.', 'eui.', 'naa.')


def _is_address_acl(entry):
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


def _check_sections(state, sections):
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


class _Reader(object):
    """The target being read, line by line."""

    def __init__(self, tid, name):
        self.state = base.TargetState(tid=tid, name=name)
        self.sections = []
        self.section = self.session = None

    def header(self, section):
        self.section = section
        self.sections.append(section)
        self.session = None

    def entry(self, text):
        state, section = self.state, self.section
        if section == 'I_T nexus':
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

    def sub_entry(self, key, value):
        session = self.session
        if session is None or self.section != 'I_T nexus':
            return
        if key == 'Initiator' and not session.initiator:
            session.initiator = value.split(' ', 1)[0]
        elif key == 'Connection' and value.isdigit():
            session.connections.append(int(value))

    def done(self):
        _check_sections(self.state, self.sections)
        return self.state


def parse_targets(output, only=None):
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
    targets, names, tids = {}, set(), set()
    reader = None
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


class TgtAdm(base.ExportTarget):
    """Exports volumes through one ``tgtd`` instance.

    :param ops: the privileged operations (:mod:`..privileged.tgt`); each
        takes the control port first and returns ``(code, out, err)``.
    """

    def __init__(self, control_port=0, ops=privileged_tgt):
        self.control_port = control_port
        self._ops = ops

    # -- plumbing --------------------------------------------------------

    def _tgtadm(self, operation, *args, ignore_gone=False,
                ignore_exists=False, secret=False):
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

    def list_targets(self):
        """All targets the daemon has, keyed by target name."""
        return parse_targets(self._tgtadm('show_targets'))

    def find(self, name):
        return parse_targets(self._tgtadm('show_targets'),
                             only=name).get(name)

    # -- export ----------------------------------------------------------

    def export(self, name, path, username=None, password=None):
        with lockutils.lock('tgt-tid-%s' % self.control_port, external=True,
                            lock_file_prefix='cinder-forcedetach-'):
            targets = self.list_targets()
            state = targets.get(name)
            if state is None:
                tid = max([t.tid for t in targets.values()] or [0]) + 1
                self._tgtadm('new_target', tid, name)
                state = base.TargetState(tid=tid, name=name)
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

    def grant(self, name, initiator):
        state = self._require(name)
        if initiator not in state.acls:
            self._tgtadm('bind_initiator', state.tid, initiator,
                         ignore_exists=True)

    def _require(self, name):
        state = self.find(name)
        if state is None:
            raise exception.TargetCommandFailed(
                command='grant', reason="can't find the target %s" % name)
        return state

    # -- teardown --------------------------------------------------------

    def _revoke_state(self, state, initiators, everyone=False):
        """Unbind ACLs first so a reconnect is refused, then drop sessions.

        *everyone*: also the address rules (``ALL``, networks, as
        upstream's helper binds) and the sessions of any initiator name.
        """
        for initiator in initiators:
            if initiator not in state.acls:
                continue
            if connector_grammar.is_iscsi_name(initiator):
                self._tgtadm('unbind_initiator', state.tid, initiator,
                             ignore_gone=True)
            else:
                # Cannot come from us; only removing the target removes it.
                LOG.warning('Target %(tgt)s has an ACL entry %(acl)r that '
                            'is not an iSCSI name; it goes with the target.',
                            {'tgt': state.name, 'acl': initiator})
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

    def revoke(self, name, initiators=None, keep=()):
        """See :meth:`base.ExportTarget.revoke`.

        *keep*: initiators of the attachments that stay.  Only an export
        with address rules needs them (see :meth:`_narrow`).
        """
        state = self.find(name)
        if state is None:
            return []
        if initiators is None:
            self._revoke_state(state, list(state.acls), everyone=True)
        elif state.address_acls:
            state = self._narrow(state, list(initiators), list(keep))
        else:
            self._revoke_state(state, list(initiators))
        return state.acls + state.address_acls

    def _narrow(self, state, initiators, keep):
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

    def unexport(self, name, state=None):
        """See :meth:`base.ExportTarget.unexport`.

        *state*: the target as just listed, to save listing it again.
        """
        state = state or self.find(name)
        if state is None:
            LOG.debug('Target %s already removed.', name)
            return
        self._revoke_state(state, list(state.acls), everyone=True)
        # The target goes with its LUNs and any session that raced in.
        self._tgtadm('delete_target', state.tid, ignore_gone=True)
        for account in state.accounts:
            self._tgtadm('delete_account', account, ignore_gone=True)

    def delete_account(self, username):
        """Remove a CHAP account that may be left from an interrupted run."""
        self._tgtadm('delete_account', username, ignore_gone=True)
