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

"""What the backend really has: the interface a vendor implements.

The kit never believes a hook's return value or Cinder's database about
access: it asks an :class:`AccessProbe`, which reads the backend itself
(target ACLs and sessions, LUN masking, watchers...).  A vendor writes one
for its backend and names it with ``--probe module.Class``; the class is
built without arguments.

Where a host holds a volume through a live session or client (an iSCSI
session, an RBD client), the probe also makes the clients, as the host
would: the kit calls :meth:`AccessProbe.connect` after each attachment it
makes and :meth:`AccessProbe.disconnect_all` when the check ends.  Both
are no-ops by default.  R8 also asks a probe with clients to write and
read one block (:meth:`AccessProbe.write_block`,
:meth:`AccessProbe.read_block`): a write of a host that was cut off must
not land.

A probe reads the backend its own way, never through the driver's code:
a bug there would otherwise hide from the kit what it hides from the
driver.  Ours: :class:`TgtProbe` (tgtd targets of
:class:`~cinder_forcedetach.drivers.iscsi.TgtISCSIDriver`, read with
``tgtadm`` and :func:`read_tgt_listing`, with a live qemu-io/libiscsi
session per attached host),
:class:`FCArrayProbe` (LUN masking of
:class:`~cinder_forcedetach.drivers.fc.FibreChannelDriver`'s array) and
:class:`cinder_forcedetach.conformance.rbd_probe.RBDProbe` (watchers and
the OSD blocklist of :class:`~cinder_forcedetach.drivers.rbd.RBDDriver`'s
images, with a live librbd client per host).
"""

import importlib
import os
import subprocess

from cinder_forcedetach.arrays import base as array_base
from cinder_forcedetach.conformance import initiator as initiator_mod

#: R8: the size of the block the kit writes and reads through a probe.
BLOCK = 4096


class ProbeError(Exception):
    """A live client could not be started or used as the kit asked."""


class AccessProbe(object):
    """Reads access to a volume from the backend, never from Cinder.

    Both methods get the volume service's driver instance (already set
    up), a Cinder ``Volume`` object and, for :meth:`host_has_access`, the
    connector of the host asked about (as the host sent it to Cinder; it
    may be hostile: never pass its fields to a shell).
    """

    def host_has_access(self, driver, volume, connector):
        """Can the host of *connector* reach *volume* now?

        True when the backend would let that host read or write the volume:
        it is granted (ACL entry, LUN mapped to its ports, ...), holds a
        live session or client, or the volume is open to every host.
        """
        raise NotImplementedError()

    def exported(self, driver, volume):
        """Does the backend still export or hold *volume* for anyone?

        False once ``revoke_host_access(volume, None)`` and
        ``remove_export`` have run: no target, no mapping, no client.
        """
        raise NotImplementedError()

    def connect(self, driver, volume, connector, connection_info):
        """Optional: make the host of *connector* a live client of *volume*.

        The kit calls it right after each attachment it makes through
        Cinder's API (attachment create with *connector*, then
        ``os-complete``), with the attachment's ``connection_info`` as the
        API returned it, before it asks :meth:`host_has_access`.  A backend
        where access is a session or client that the host itself opens
        (RBD: a librbd client holding the image) starts one here, as the
        host would; a raise fails the check's precondition.  Default:
        nothing (access is a grant the probe reads: ACL, LUN masking).
        """

    def disconnect_all(self):
        """Optional: stop every client :meth:`connect` started.

        Called when each check ends, before the kit deletes the check's
        volumes; must be idempotent.  Default: nothing.
        """

    def write_block(self, driver, volume, connector, offset, pattern):
        """Optional (R8): the live client of a host writes one block.

        The client :meth:`connect` started for the host of *connector* on
        *volume* writes :data:`BLOCK` bytes of the byte *pattern* at
        *offset*, as its guest would, and waits for the backend's answer
        (flushed: an acknowledged write is on the backend).  Returns True
        when the backend acknowledged it, False when it refused it (I/O
        error, the client fenced), None when no answer came within the
        probe's own timeout; a client that did not answer is stopped
        before this returns, so that a write it retries cannot land later.
        Raises :class:`NotImplementedError` (the default) when the probe
        has no clients: R8 then checks access alone.
        """
        raise NotImplementedError()

    def read_block(self, driver, volume, connector, offset):
        """Optional (R8): the :data:`BLOCK` bytes *volume* holds at *offset*.

        As the backend has them now: read through the live client of the
        host of *connector* (a host that has access), or directly from the
        backend; never from a cache of another client.  None when the read
        failed.  Default: :class:`NotImplementedError`, as
        :meth:`write_block`.
        """
        raise NotImplementedError()


def client_key(volume, connector):
    """What a probe files the live client of *connector*'s host under."""
    return (volume.name, (connector or {}).get('host'))


def client_for(clients, volume, connector):
    """The newest of *clients* filed under :func:`client_key`, or None."""
    key = client_key(volume, connector)
    for client in reversed(clients):
        if getattr(client, 'key', None) == key:
            return client
    return None


class TgtTarget(object):
    """One target of a tgtd listing, as :func:`read_tgt_listing` reads it.

    ``sessions``: the text after ``Initiator:`` of each I_T nexus (the
    initiator name, then `` alias: ...``); ``luns``: LUN -> backing store
    path; ``acls``: every entry of the ACL section as printed (initiator
    names and address rules alike); ``accounts``: bound CHAP accounts.
    """

    def __init__(self, tid, name):
        self.tid, self.name = tid, name
        self.state = None
        self.sessions, self.luns, self.accounts, self.acls = [], {}, [], []

    def __repr__(self):
        return ('TgtTarget(%d, %r, state=%r, sessions=%r, luns=%r, '
                'accounts=%r, acls=%r)' % (
                    self.tid, self.name, self.state, self.sessions,
                    self.luns, self.accounts, self.acls))


def read_tgt_listing(listing):
    """``tgtadm --lld iscsi --op show --mode target`` -> [TgtTarget].

    The kit's own reading, independent of any driver's parser.  tgtd
    prints each target as a header at the start of a line (``Target
    <tid>: <name>``), its sections 4 spaces in (``ACL information:``),
    their entries 8 spaces in (``I_T nexus: 1``, ``LUN: 1``, an account,
    an ACL entry) and an entry's details 12 spaces in (``Initiator: ...``,
    ``Backing store path: ...``); LUN numbers are kept as printed.  Lines
    end at ``\\n`` only, as tgtd ends them; everything else (connections,
    LUN details) is skipped.
    """
    targets, target, section, lun = [], None, None, None
    for line in listing.split('\n'):
        if line.startswith('Target '):
            tid, sep, name = line[len('Target '):].partition(': ')
            if not sep or not tid.isdigit():
                raise ProbeError('unexpected line in the tgtd listing: %r'
                                 % line)
            target, section, lun = TgtTarget(int(tid), name), None, None
            targets.append(target)
            continue
        text = line.lstrip(' ')
        depth = len(line) - len(text)
        key, _sep, value = text.partition(': ')
        if target is None or not text:
            continue
        if depth == 4 and text.endswith(' information:'):
            section = text[:-len(' information:')]
        elif depth == 8 and section == 'System' and key == 'State':
            target.state = value
        elif depth == 8 and section == 'I_T nexus' and key == 'I_T nexus':
            target.sessions.append('')
        elif (depth == 12 and section == 'I_T nexus' and
              key == 'Initiator' and target.sessions):
            target.sessions[-1] = value
        elif depth == 8 and section == 'LUN' and key == 'LUN':
            lun = value
            target.luns[lun] = None
        elif (depth == 12 and section == 'LUN' and
              key == 'Backing store path' and lun is not None):
            target.luns[lun] = value
        elif depth == 8 and section == 'Account':
            target.accounts.append(text)
        elif depth == 8 and section == 'ACL':
            target.acls.append(text)
    return targets


def is_initiator_name(entry):
    """An ACL entry naming one initiator (else an address rule: ALL...)."""
    return entry[:4].lower() in ('iqn.', 'eui.', 'naa.')


class TgtProbe(AccessProbe):
    """The volume's tgt targets: ACL entries, address rules and sessions.

    Reads tgtd itself (``tgtadm --lld iscsi --op show --mode target`` on
    the backend's control port, parsed by :func:`read_tgt_listing`), never
    through the driver's own parser: a parser bug that hides an ACL entry
    or a session from the driver does not hide it from the kit.  The
    volume's targets are those named ``driver.target_name(volume)`` and
    any whose LUN is backed by ``driver.local_path(volume)``.  A host has
    access when one of them has its initiator name in its ACL, a session
    (I_T nexus) of that initiator, or an address rule (any ACL entry that
    is not an iSCSI name: ``ALL``, an address, a network); whatever the
    target's state.  The control port is the backend's
    ``forcedetach_tgt_control_port`` (else ``driver.target.control_port``,
    else tgtd's default 0); ``tgtadm``: the command run (the kit runs as
    root; set e.g. ``('sudo', '-n', 'tgtadm')`` otherwise).

    Works for any driver with ``target_name(volume)`` (and
    ``local_path(volume)``), as our tgt driver has.

    Each attached host is a live initiator
    (:class:`~.initiator.QemuIoInitiator`, qemu-io over libiscsi) that
    logs in with the connector's initiator name and the attachment's
    ``connection_info`` (portal, target, LUN, CHAP) and writes its first
    block, so a host's access is a real session on the target: a driver
    that unbinds the host's ACL entry and leaves its session still lets
    the host write, and the probe, which counts sessions as tgtd lists
    them, says so.  ``write_timeout``: the seconds a live initiator's
    write may take before it counts as unanswered (a cut-off initiator
    gets no answer: libiscsi retries its refused login).
    """

    write_timeout = 3
    tgtadm = ('tgtadm',)
    #: seconds ``tgtadm`` may take.
    tgtadm_timeout = 30

    def __init__(self):
        self.clients = []

    @staticmethod
    def control_port(driver):
        conf = getattr(driver, 'configuration', None)
        try:
            port = getattr(conf, 'forcedetach_tgt_control_port', None)
        except Exception:
            port = None
        if port is None:
            port = getattr(getattr(driver, 'target', None), 'control_port',
                           None)
        return int(port or 0)

    def listing(self, driver):
        """tgtd's listing of every target, as ``tgtadm`` prints it."""
        argv = list(self.tgtadm) + [
            '-C', str(self.control_port(driver)), '--lld', 'iscsi',
            '--op', 'show', '--mode', 'target']
        try:
            proc = subprocess.run(argv, capture_output=True, check=False,
                                  timeout=self.tgtadm_timeout)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ProbeError('%s: %s' % (' '.join(argv), err))
        if proc.returncode:
            raise ProbeError('%s exited %d: %s' % (
                ' '.join(argv), proc.returncode,
                proc.stderr.decode(errors='replace').strip()))
        return proc.stdout.decode(errors='replace')

    def targets(self, driver, volume):
        """The volume's targets as tgtd has them now (see the class)."""
        name = driver.target_name(volume)
        local_path = getattr(driver, 'local_path', None)
        path = (os.path.realpath(local_path(volume))
                if callable(local_path) else None)
        return [t for t in read_tgt_listing(self.listing(driver))
                if t.name == name or path in (
                    os.path.realpath(p) for p in t.luns.values()
                    if p and p != 'None')]

    def host_has_access(self, driver, volume, connector):
        initiator = (connector or {}).get('initiator')
        for target in self.targets(driver, volume):
            if not all(map(is_initiator_name, target.acls)):
                # initiator-address ALL (or an address or network): any
                # initiator name from there logs in.
                return True
            if not initiator:
                continue
            if initiator in target.acls or any(
                    s == initiator or s.startswith(initiator + ' alias: ')
                    for s in target.sessions):
                return True
        return False

    def exported(self, driver, volume):
        return bool(self.targets(driver, volume))

    # -- live initiators ---------------------------------------------------

    def connect(self, driver, volume, connector, connection_info):
        """Log the host of *connector* in, as os-brick would; one write."""
        info = dict(connection_info or {})
        info = info.get('data', info)
        missing = [k for k in ('target_portal', 'target_iqn', 'target_lun')
                   if info.get(k) in (None, '')]
        if missing:
            raise ProbeError('connection_info %r has no %s' % (
                sorted(info), ', '.join(missing)))
        host = (connector or {}).get('host')
        try:
            client = initiator_mod.QemuIoInitiator(
                info['target_portal'], info['target_iqn'],
                (connector or {}).get('initiator'),
                info.get('auth_username'), info.get('auth_password'),
                lun=int(info['target_lun']))
        except OSError as err:
            raise ProbeError('cannot start qemu-io (with libiscsi), the '
                             'live initiator of host %s: %s' % (host, err))
        client.key = client_key(volume, connector)
        self.clients.append(client)
        if client.opened is None:
            raise ProbeError('the live initiator of host %s could not log in '
                             'to %s at %s: %s' % (
                                 host, info['target_iqn'],
                                 info['target_portal'],
                                 client.output.decode(errors='replace')
                                 .strip()[-500:]))
        if client.write(0x5a, 0, BLOCK, timeout=2 * self.write_timeout) \
                is not True:
            raise ProbeError('the live initiator of host %s logged in but '
                             'could not write: %s' % (
                                 host, client.output.decode(
                                     errors='replace').strip()[-500:]))
        return info['target_iqn']

    def write_block(self, driver, volume, connector, offset, pattern):
        client = client_for(self.clients, volume, connector)
        if client is None:
            return None
        # qemu-io writes through (no cache of its own over libiscsi): an
        # answer is the target's.
        done = client.write(pattern, offset, BLOCK,
                            timeout=self.write_timeout)
        if done is None:
            # libiscsi retries a refused reconnect for ever: stop it, so
            # that the write it holds cannot land later.
            client.close()
            self.clients.remove(client)
        return done

    def read_block(self, driver, volume, connector, offset):
        client = client_for(self.clients, volume, connector)
        if client is None:
            return None
        return client.read_bytes(offset, BLOCK,
                                 timeout=2 * self.write_timeout)

    def disconnect_all(self):
        clients, self.clients = self.clients, []
        for client in clients:
            client.close()


class FCArrayProbe(AccessProbe):
    """The array's LUN masking: hosts_of_volume and their WWPNs."""

    @staticmethod
    def _wwpns(connector):
        result = set()
        wwpns = (connector or {}).get('wwpns')
        if not isinstance(wwpns, (list, tuple)):
            return result
        for wwpn in wwpns:
            try:
                result.add(array_base.normalize_wwpn(wwpn))
            except (ValueError, TypeError, AttributeError):
                continue
        return result

    def host_has_access(self, driver, volume, connector):
        wwpns = self._wwpns(connector)
        array = driver.array
        for host in array.hosts_of_volume(volume.name):
            if wwpns.intersection(array.host_wwpns(host)):
                return True
        return False

    def exported(self, driver, volume):
        return bool(driver.array.hosts_of_volume(volume.name))


def load_class(path):
    """``module.Class`` (or ``module:Class``) -> the class."""
    module, sep, name = path.replace(':', '.').rpartition('.')
    if not sep or not module:
        raise ValueError('%r is not module.Class' % path)
    return getattr(importlib.import_module(module), name)


def load(probe):
    """A probe instance from an instance, a class or ``module.Class``."""
    if isinstance(probe, str):
        probe = load_class(probe)
    if isinstance(probe, type):
        probe = probe()
    for method in ('host_has_access', 'exported'):
        if not callable(getattr(probe, method, None)):
            raise TypeError('probe %r has no %s()' % (probe, method))
    return probe
