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

"""The seed flows through real Nova: ``tools/stack.sh up --nova``.

One box for the class: real Nova 34 (API, conductor, scheduler, a compute
on Nova's fake virt driver), placement 16, Glance, Keystone and MariaDB
around the box's Cinder and our tgt iSCSI driver.  Every volume call is
Nova's own code.  What is not real, and why: the hypervisor (Nova's fake
driver: servers exist only in Nova's database; its connector carries a
valid initiator name of its own) and the network's data plane (Neutron
is real, with no agent: the box's ML2 driver binds the ports; these
servers boot with no NIC, tempest's boot on tenant networks).
The kernel iSCSI initiator does not exist here, so the host side is a
libiscsi initiator (qemu-io) where a test proves what a host can reach.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.error
import uuid

import testtools

from cinder_forcedetach.conformance import initiator as qemu_io
from cinder_forcedetach.conformance import probe
from devbox import process
from devbox.services import nova as nova_service
from devbox.services import tgtd
from devbox import stack as stack_mod
from tests import fakes
from tests.functional import nova_audit_cases
from tests.support import cutoff
from tests.support import waiting

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
STACK_SH = os.path.join(REPO, 'tools', 'stack.sh')
BOX_IQN = nova_audit_cases.BOX_IQN
#: Microversion with volume-backed rebuild (os-reimage).
REBUILD_VERSION = '2.93'


def run(argv, env, timeout=900):
    return subprocess.run(argv, env=env, capture_output=True, text=True,
                          timeout=timeout)


class _NovaBoxTestCase(testtools.TestCase):
    """One ``up --nova`` box on *BACKEND* for the class, and its helpers."""

    #: STACK_BACKENDS of the box: one backend, or a comma list.
    BACKEND = 'tgt'
    #: Nova's virt driver (STACK_VIRT).
    VIRT = 'fake'
    #: Nova's compute hosts (STACK_COMPUTES).
    COMPUTES = 1

    @classmethod
    def setUpClass(cls):
        super(_NovaBoxTestCase, cls).setUpClass()
        cls.state = tempfile.mkdtemp(prefix='cfd-nova-%s-%s-' % (
            cls.VIRT, cls.BACKEND.replace(',', '-')))
        cls.env = fakes.box_env(cls.state, nova=True,
                                ceph='rbd' in cls.BACKEND.split(','))
        cls.env['STACK_BACKENDS'] = cls.BACKEND
        cls.env['STACK_VIRT'] = cls.VIRT
        cls.env['STACK_COMPUTES'] = str(cls.COMPUTES)
        res = run([STACK_SH, 'up'], cls.env)
        cls.up_output = res.stdout + res.stderr
        if res.returncode:
            cls.tearDownClass()
            raise AssertionError('stack up --nova failed:\n' +
                                 cls.up_output[-4000:])
        cls.box = stack_mod.Stack(stack_mod.Settings(
            type('Args', (), {'state_dir': cls.state})()))
        cls.control = cls.box.info['tgt_control_port']
        # Each test makes its own volumes: more than the default 10.
        cls.box.api('PUT', '/os-quota-sets/' + cls.box.info['project_id'],
                    {'quota_set': {'volumes': -1, 'gigabytes': -1}})

    @classmethod
    def tearDownClass(cls):
        run([STACK_SH, 'down'], cls.env)
        shutil.rmtree(cls.state, ignore_errors=True)
        super(_NovaBoxTestCase, cls).tearDownClass()

    # -- helpers ----------------------------------------------------------

    def shell(self, command):
        """A printed command line, as a user pastes it."""
        return run(['bash', '-c', command], self.env, timeout=300)

    def wait(self, predicate, what, timeout=120):
        return waiting.wait_for(predicate, timeout, what, interval=0.5)

    def api(self, method, path, body=None):
        return self.box.api(method, path, body, version='3.70')

    def api_as(self, token, method, path, body=None):
        """A Cinder call with *token* (a user other than the admin)."""
        return self.box.http_json(self.box.service('cinder').api_url(
            self.box.info) + path, method, body, {
            'X-Auth-Token': token, 'OpenStack-API-Version': 'volume 3.70'})

    def member_token(self):
        """A token of a new user with the member role in the project."""
        box, name = self.box, 'member-' + uuid.uuid4().hex[:8]
        keystone, ctx = box.service('keystone-api'), box.ctx
        password = uuid.uuid4().hex
        admin = keystone.token(ctx)
        role = keystone.find(ctx, admin, 'roles', 'member',
                             {'name': 'member'})
        user = keystone.find(ctx, admin, 'users', name, {
            'name': name, 'domain_id': 'default', 'password': password})
        keystone.call(ctx, 'PUT', '/projects/%s/users/%s/roles/%s' % (
            box.info['project_id'], user, role), token=admin)
        _s, headers, _b = keystone.call(ctx, 'POST', '/auth/tokens', {
            'auth': {
                'identity': {'methods': ['password'], 'password': {'user': {
                    'id': user, 'password': password}}},
                'scope': {'project': {'id': box.info['project_id']}}}})
        return headers['X-Subject-Token']

    def glance_upload(self, name, data):
        return self.box.service('glance-api').upload(self.box.ctx, name, data)

    def nova(self, method, path, body=None):
        return self.box.service('nova').call(self.box.ctx, method, path, body,
                                             version=REBUILD_VERSION)

    def volume(self, vol_id):
        return self.api('GET', '/volumes/' + vol_id)['volume']

    def server(self, server_id):
        return self.nova('GET', '/servers/' + server_id)['server']

    def attachments(self, vol_id):
        return self.api('GET', '/attachments/detail?volume_id=' +
                        vol_id)['attachments']

    def new_volume(self, name, image=None, backend=None):
        body = {'size': 1, 'name': name}
        if image:
            body['imageRef'] = image
        if backend:
            body['volume_type'] = backend
        vol_id = self.api('POST', '/volumes', {'volume': body})['volume']['id']
        self.wait(lambda: self.volume(vol_id)['status'] == 'available',
                  'volume %s available' % name)
        return vol_id

    def box_image(self):
        return self.box.service('nova').image_id(self.box.ctx)

    def settled(self, server_id, status='ACTIVE'):
        def done():
            srv = self.server(server_id)
            if srv['status'] == 'ERROR':
                self.fail('server %s ERROR: %s\nthe scheduler said:\n%s' % (
                    server_id, (srv.get('fault') or {}).get('message'),
                    self.scheduler_reasons()))
            return (srv['status'] == status and
                    srv['OS-EXT-STS:task_state'] is None)
        self.wait(done, 'server %s %s' % (server_id, status))

    def scheduler_reasons(self, lines=12):
        """The scheduler log's last lines on hosts: what a failed boot met."""
        path = os.path.join(self.state, 'logs', 'nova-scheduler.log')
        try:
            with open(path, errors='replace') as f:
                found = [line.rstrip()[:300] for line in f if any(
                    word in line for word in (
                        'Filter', 'allocation candidates', 'NoValidHost',
                        'No valid host', 'unmapped', 'hosts'))]
        except OSError as err:
            return str(err)
        return '\n'.join(found[-lines:]) or '(nothing)'

    def boot(self, name, boot_volume=None):
        """A server booted from *boot_volume*, else from the box's image."""
        server = {'name': name, 'flavorRef': nova_service.FLAVORS[0][1],
                  'networks': 'none'}
        if boot_volume:
            server['block_device_mapping_v2'] = [{
                'source_type': 'volume', 'destination_type': 'volume',
                'uuid': boot_volume, 'boot_index': 0}]
        else:
            server['imageRef'] = self.box_image()
        server_id = self.nova('POST', '/servers',
                              {'server': server})['server']['id']
        self.addCleanup(self.delete_server, server_id)
        self.settled(server_id)
        return server_id

    def delete_server(self, server_id):
        self.unless_gone(self.nova, 'DELETE', '/servers/' + server_id)

    @staticmethod
    def unless_gone(call, *args):
        """``call(*args)``; a 404 (already gone) is fine."""
        try:
            call(*args)
        except urllib.error.HTTPError as err:
            if err.code != 404:
                raise

    def attach(self, server_id, vol_id):
        self.nova('POST', '/servers/%s/os-volume_attachments' % server_id,
                  {'volumeAttachment': {'volumeId': vol_id}})
        self.wait(lambda: self.volume(vol_id)['status'] == 'in-use',
                  'volume %s in-use' % vol_id)

    def nova_detach(self, server_id, vol_id, what='Nova\'s detach'):
        """Detach through Nova; wait until Cinder has it available."""
        self.nova('DELETE', '/servers/%s/os-volume_attachments/%s' % (
            server_id, vol_id))
        self.wait(lambda: self.volume(vol_id)['status'] == 'available',
                  what)

    def nova_volumes(self, server_id):
        return {a['volumeId'] for a in self.nova(
            'GET', '/servers/%s/os-volume_attachments' % server_id
        )['volumeAttachments']}

    def target(self, vol_id):
        """(exists, ACL initiators) of the volume's tgt target."""
        out = tgtd.tgtadm(self.control, '--op', 'show', '--mode',
                          'target').stdout
        for target in probe.read_tgt_listing(out):
            if vol_id in target.name:
                return True, sorted(target.acls)
        return False, []

    def backing_path(self, vol_id):
        """The volume's file, which the box's tgtd serves."""
        return os.path.join(self.state, 'volumes', 'tgt', 'volume-' + vol_id)

    def compute_session(self, vol_id):
        """The compute host's initiator, logged in with Nova's attachment.

        Nova's fake driver never connects; this qemu-io session with the
        compute's initiator name and the attachment's CHAP account is the
        host the volume is exported to.
        """
        [att] = [a for a in self.attachments(vol_id)
                 if a['status'] == 'attached']
        info = att['connection_info']
        host = qemu_io.QemuIoInitiator(
            info['target_portal'], info['target_iqn'], BOX_IQN,
            info['auth_username'], info['auth_password'],
            lun=info['target_lun'])
        self.addCleanup(host.close)
        self.assertIsNotNone(host.opened, host.output)
        return host

    def audit(self, *args):
        """(exit code, this box's findings by volume) of one audit run."""
        cinder, ctx = self.box.service('cinder'), self.box.ctx
        res = self.shell(cinder.manage_command(
            ctx, '--format json audit --grace 0 %s --config-file %s' % (
                ' '.join(args), cinder.conf_path(ctx))))
        try:
            data = json.loads(res.stdout)
        except ValueError:
            self.fail('audit printed no JSON (exit %d): %s %s' % (
                res.returncode, res.stdout, res.stderr[-3000:]))
        self.assertTrue(data['summary']['nova consulted'],
                        'the audit did not read Nova: %s' % data)
        password = self.box.ctx.secrets()['cinder_password']
        self.assertNotIn(password, res.stdout + res.stderr)
        by_volume = {}
        for row in data['findings']:
            by_volume.setdefault(row['volume'], []).append(row)
        return res.returncode, by_volume

    def manage(self, *args):
        """nova-manage on the compute host, its JSON answer."""
        res = run([os.path.join(self.box.info['venv'], 'bin', 'nova-manage'),
                   '--config-file', self.box.service('nova').conf_path(
                       self.box.ctx)] + list(args),
                  self.env, timeout=300)
        # nova-manage prints its errors to stdout, Python's warnings to
        # stderr.
        self.assertEqual(0, res.returncode, 'stdout: %s\nstderr: %s' % (
            res.stdout[-3000:], res.stderr[-3000:]))
        return res.stdout

    def stopped_with_data_volume(self, name):
        """A server booted from a volume, a data volume attached, SHUTOFF.

        ``nova-manage volume_attachment refresh`` wants it stopped.
        Returns (server id, data volume id).
        """
        boot_id = self.new_volume(name + '-boot', self.box_image())
        data_id = self.new_volume(name + '-data')
        server_id = self.boot(name, boot_id)
        self.attach(server_id, data_id)
        self.nova('POST', '/servers/%s/action' % server_id,
                  {'os-stop': None})
        self.settled(server_id, 'SHUTOFF')
        return server_id, data_id

    def refresh(self, server_id, vol_id):
        """nova-manage get_connector, then refresh; (connector, new BDM)."""
        connector = json.loads(self.manage('volume_attachment',
                                           'get_connector', '--json'))
        path = os.path.join(self.state, 'connector.json')
        with open(path, 'w') as f:
            json.dump(connector, f)
        self.manage('volume_attachment', 'refresh', server_id, vol_id, path)
        return connector, json.loads(self.manage(
            'volume_attachment', 'show', server_id, vol_id, '--json'))


class NovaBoxTestCase(nova_audit_cases.NovaAuditCases, _NovaBoxTestCase):
    """Cinder's and Nova's own paths, end to end, with our tgt driver."""

    # -- the printed commands -------------------------------------------

    def test_printed_commands_boot_force_detach_and_reboot_cleans_up(self):
        """Boot from our volume, force-detach it, a reboot drops the BDM.

        As pasted from ``up``'s output.  Cinder refuses the admin's
        force-detach of an attachment Nova holds (409, bug 2004555); the
        service user's, with its service token, tears the target down;
        Nova still lists the volume until a reboot finds the attachment
        gone in Cinder and removes the stale BDM.
        """
        lines = self.up_output.splitlines()

        def printed(title):
            return lines[lines.index(title) + 1].strip()

        res = self.shell(printed("Create a bootable volume from the box's "
                                 "image:"))
        self.assertEqual(0, res.returncode, res.stderr)
        vol_id = re.search(r'\| id\s+\| (\S+)', res.stdout).group(1)
        self.wait(lambda: self.volume(vol_id)['status'] == 'available',
                  'bootable volume')
        boot = [t for t in lines if t.startswith('Boot a server from it')][0]
        res = self.shell(printed(boot).replace('VOLUME_ID', vol_id))
        self.assertEqual(0, res.returncode, res.stdout + res.stderr)
        server_id = [s['id'] for s in self.nova('GET', '/servers')['servers']
                     if s['name'] == 'box-server'][0]
        self.addCleanup(self.delete_server, server_id)
        self.settled(server_id)
        self.assertEqual((True, [BOX_IQN]), self.target(vol_id))
        host = self.compute_session(vol_id)
        self.assertTrue(host.write(0x4e, offset=4096))
        res = self.shell(printed('Its attachments:'))
        self.assertIn(vol_id, res.stdout)

        admin = printed('Force-detach it from every host:').replace(
            'VOLUME_ID', vol_id)
        res = self.shell(admin)
        self.assertEqual(3, res.returncode, res.stderr)
        self.assertIn('ConflictNovaUsingAttachment', res.stderr)
        self.assertEqual((True, [BOX_IQN]), self.target(vol_id))
        self.assertTrue(host.read(0x4e, offset=4096))

        service = [t for t in lines if t.startswith('Force-detach the volume '
                                                    'while Nova holds it')][0]
        control = cutoff.control_write(self, host, 0x4e, offset=4096,
                                       backing=self.backing_path(vol_id))
        res = self.shell(printed(service).replace('VOLUME_ID', vol_id))
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertEqual((False, []), self.target(vol_id))
        cutoff.assert_cut_off(self, host, self.backing_path(vol_id), 0x4f,
                              control=control)
        self.assertEqual('available', self.volume(vol_id)['status'])
        self.assertEqual([], self.attachments(vol_id))
        self.assertEqual({vol_id}, self.nova_volumes(server_id))

        res = self.shell(printed('Then a reboot drops the server\'s stale '
                                 'attachment:'))
        self.assertEqual(0, res.returncode, res.stderr)
        self.wait(lambda: not self.nova_volumes(server_id),
                  'Nova to drop the stale attachment')
        with open(os.path.join(self.state, 'logs', 'nova-compute.log')) as f:
            self.assertIn('Removing stale volume attachment', f.read())
        self.assertEqual((False, []), self.target(vol_id))

    # -- server detach rules (Cinder's test_server_detach_rules) ---------

    def test_detach_rules_for_an_attachment_nova_holds(self):
        """409 for the user's and admin's detach; a service may.

        A non-admin member of the server's project and the admin both get
        409 for ``DELETE /attachments/ID`` and os-detach.  The member's
        detach through Nova passes (Nova adds its service token) and runs
        our teardown with the member's context (it once failed there:
        recording the teardown needs admin rights the member lacks).
        """
        boot_id = self.new_volume('rules-boot', self.box_image())
        data_id = self.new_volume('rules-data')
        server_id = self.boot('rules', boot_id)
        self.attach(server_id, data_id)
        attachment = self.attachments(data_id)[0]['id']
        member = self.member_token()
        for token in (self.box.ctx.auth_token(), member):
            for call in (('DELETE', '/attachments/' + attachment, None),
                         ('POST', '/volumes/%s/action' % data_id,
                          {'os-detach': {'attachment_id': attachment}})):
                err = self.assertRaises(urllib.error.HTTPError,
                                        self.api_as, token, *call)
                self.assertEqual(409, err.code, err.read())
        self.assertEqual((True, [BOX_IQN]), self.target(data_id))
        # Nova's own detach (it sends its service token) tears it down.
        self.box.http_json(
            self.box.service('nova').url(self.box.info) +
            '/v2.1/servers/%s/os-volume_attachments/%s'
            % (server_id, data_id), 'DELETE', headers={'X-Auth-Token': member})
        self.wait(lambda: self.volume(data_id)['status'] == 'available',
                  'Nova detach')
        self.assertEqual((False, []), self.target(data_id))

    # -- dangling attachments --------------------------------------------

    def test_reboot_deletes_an_attachment_made_only_in_cinder(self):
        """An attachment Cinder has for the server but Nova never made."""
        boot_id = self.new_volume('dangle-boot', self.box_image())
        stray_id = self.new_volume('dangle-stray')
        server_id = self.boot('dangle', boot_id)
        stray = self.api('POST', '/attachments', {'attachment': {
            'volume_uuid': stray_id, 'instance_uuid': server_id}}
        )['attachment']
        self.assertEqual('reserved', self.volume(stray_id)['status'])
        self.nova('POST', '/servers/%s/action' % server_id,
                  {'reboot': {'type': 'SOFT'}})
        self.settled(server_id)
        self.wait(lambda: self.volume(stray_id)['status'] == 'available',
                  'Nova to delete the stray attachment')
        self.assertNotIn(stray['id'],
                         [a['id'] for a in self.attachments(stray_id)])
        self.assertEqual({boot_id}, self.nova_volumes(server_id))
        self.assertEqual((True, [BOX_IQN]), self.target(boot_id))

    # -- shelve-offload ----------------------------------------------------

    def test_shelved_offloaded_attach_detach_then_unshelve(self):
        """Attachments without a connector while no host has the server.

        Offload leaves the boot volume ``reserved`` with no connector and
        removes its export; a volume attached while offloaded is complete
        in Cinder with no connection; one detached while offloaded goes
        back to ``available`` with nothing to tear down; unshelve connects
        every volume to the compute host again.
        """
        boot_id = self.new_volume('shelve-boot', self.box_image())
        first = self.new_volume('shelve-first')
        second = self.new_volume('shelve-second')
        server_id = self.boot('shelve', boot_id)
        before = self.compute_session(boot_id)
        control = cutoff.control_write(self, before, 0x61, offset=4096)
        self.nova('POST', '/servers/%s/action' % server_id, {'shelve': None})
        self.settled(server_id, 'SHELVED_OFFLOADED')
        reserved = self.attachments(boot_id)
        self.assertEqual(['reserved'], [a['status'] for a in reserved])
        self.assertEqual((False, []), self.target(boot_id))
        # The offload cut the host: its write and read are refused.
        cutoff.assert_cut_off(self, before, self.backing_path(boot_id),
                              0xe1, control=control, read=True)

        self.attach(server_id, first)
        [att] = self.attachments(first)
        self.assertEqual('attached', att['status'])
        self.assertFalse(att['connection_info'])
        self.assertEqual((False, []), self.target(first))
        self.attach(server_id, second)
        self.nova_detach(server_id, second, 'detach while offloaded')
        self.assertEqual([], self.attachments(second))

        self.nova('POST', '/servers/%s/action' % server_id,
                  {'unshelve': None})
        self.settled(server_id)
        for vol_id in (boot_id, first):
            [att] = self.attachments(vol_id)
            self.assertEqual('attached', att['status'])
            self.assertTrue(att['connection_info'])
            self.assertEqual((True, [BOX_IQN]), self.target(vol_id))
        self.assertEqual({boot_id, first}, self.nova_volumes(server_id))
        self.assertTrue(self.compute_session(boot_id).read(0x61, offset=4096))

    # -- volume-backed rebuild -------------------------------------------

    def test_rebuild_of_a_volume_backed_server_reimages_it(self):
        """Rebuild (2.93) runs Cinder's os-reimage through our driver."""
        boot_id = self.new_volume('rebuild-boot', self.box_image())
        server_id = self.boot('rebuild', boot_id)
        old = self.compute_session(boot_id)
        new_image = b'cinder-forcedetach rebuild\n'.ljust(3 << 20, b'\x5a')
        image_id = self.glance_upload('rebuild-image', new_image)
        # Beyond both images' data: what the rebuild never writes there.
        beyond = 8 << 20
        path = os.path.join(self.state, 'volumes', 'tgt', 'volume-' + boot_id)
        control = cutoff.control_write(self, old, 0x3c, offset=beyond,
                                       backing=path)
        self.nova('POST', '/servers/%s/action' % server_id,
                  {'rebuild': {'imageRef': image_id}})
        self.wait(lambda: self.volume(boot_id)['status'] != 'in-use' or
                  self.server(server_id)['status'] != 'ACTIVE',
                  'the rebuild to start', timeout=30)
        self.settled(server_id)
        # Nova's detach of the old attachment ended the old session: its
        # write of 0xa5 (no image has it at 8 MiB) is refused, positively,
        # and lands neither on the file nor through the new attachment.
        cutoff.assert_cut_off(self, old, path, 0xa5, control=control,
                              control_landed=False)
        new_host = self.compute_session(boot_id)
        seen = new_host.read_bytes(beyond, 4096, timeout=10)
        self.assertIsNotNone(seen, new_host.output)
        self.assertNotIn(b'\xa5', seen)
        with open(path, 'rb') as f:
            self.assertEqual(new_image, f.read(len(new_image)))
        self.assertEqual(image_id, self.volume(boot_id)[
            'volume_image_metadata']['image_id'])
        self.assertEqual((True, [BOX_IQN]), self.target(boot_id))
        self.assertTrue(new_host.read(0x5a, offset=len(new_image) - 4096))

    # -- nova-manage volume_attachment -----------------------------------

    def test_volume_attachment_refresh_after_a_portal_move(self):
        """show / get_connector / refresh reach the target's new portal.

        The volume service moves its portal to 127.0.0.2 (tgtd listens on
        both, as during a migration of the storage network).  After
        ``nova-manage volume_attachment refresh`` with this host's own
        connector, Nova's connection_info names the new portal, Cinder has
        a new attachment, the ACL holds this host's initiator instead of
        the compute's, and a libiscsi initiator with that name logs in
        through the new portal and reads the volume.
        """
        server_id, data_id = self.stopped_with_data_volume('refresh')
        before = json.loads(self.manage('volume_attachment', 'show',
                                        server_id, data_id, '--json'))
        old_info = json.loads(before['connection_info'])
        port = self.box.info['iscsi_port']
        self.assertEqual('127.0.0.1:%d' % port,
                         old_info['data']['target_portal'])

        tgtd.tgtadm(self.control, '--op', 'new', '--mode', 'portal',
                    '--param', 'portal=127.0.0.2:%d' % port)
        extra = os.path.join(self.state, 'portal.conf')
        with open(extra, 'w') as f:
            f.write('[tgt]\ntarget_ip_address = 127.0.0.2\n')
        process.Proc(self.box.ctx, 'cinder-volume').stop()
        res = run([STACK_SH, 'up'], dict(self.env, STACK_EXTRA_CONF=extra,
                                         STACK_SKIP_INSTALL='1'))
        self.assertEqual(0, res.returncode, res.stderr[-3000:])

        connector, after = self.refresh(server_id, data_id)
        info = json.loads(after['connection_info'])['data']
        self.assertEqual('127.0.0.2:%d' % port, info['target_portal'])
        self.assertNotEqual(before['attachment_id'], after['attachment_id'])
        self.assertEqual([after['attachment_id']],
                         [a['id'] for a in self.attachments(data_id)])
        self.assertEqual((True, [connector['initiator']]),
                         self.target(data_id))
        host = qemu_io.QemuIoInitiator(
            info['target_portal'], info['target_iqn'], connector['initiator'],
            info.get('auth_username'), info.get('auth_password'),
            lun=info['target_lun'])
        self.addCleanup(host.close)
        self.assertIsNotNone(host.opened, host.output)
        self.assertTrue(host.read(0, length=4096))


class NovaRbdBoxTestCase(_NovaBoxTestCase):
    """The same Nova on our RBD driver, Glance's images in the same Ceph."""

    BACKEND = 'rbd'

    def rbd_parent(self, vol_id):
        """``pool/image@snap`` the volume's RBD image is cloned from."""
        ceph = self.box.service('ceph').settings(self.box.ctx)
        res = run(['rbd', '-c', ceph['CEPH_CONF'], '-k',
                   ceph['CEPH_ADMIN_KEYRING'], 'info', '--format', 'json',
                   '%s/volume-%s' % (ceph['CEPH_POOL'], vol_id)],
                  self.env, timeout=60)
        self.assertEqual(0, res.returncode, res.stderr)
        parent = json.loads(res.stdout).get('parent')
        return parent and '%(pool)s/%(image)s@%(snapshot)s' % parent

    def test_boot_from_a_clone_then_rebuild_by_clone(self):
        """Create from image and rebuild both take the copy-on-write path.

        Glance's RBD store is in the box's Ceph: the boot volume is a
        clone of the image's snapshot, and Nova's volume-backed rebuild
        (2.93, os-reimage) makes it a clone of the new image.
        """
        image_id = self.box_image()
        boot_id = self.new_volume('clone-boot', image_id)
        pool = self.box.service('ceph').settings(
            self.box.ctx)['CEPH_IMAGES_POOL']
        self.assertEqual('%s/%s@snap' % (pool, image_id),
                         self.rbd_parent(boot_id))
        server_id = self.boot('clone', boot_id)
        new_id = self.glance_upload(
            'rebuild-rbd', b'rbd rebuild\n'.ljust(2 << 20, b'\x6b'))
        self.nova('POST', '/servers/%s/action' % server_id,
                  {'rebuild': {'imageRef': new_id}})
        # Cinder drops the image metadata while it reimages: absent, then
        # the new image's.
        self.wait(lambda: (self.volume(boot_id).get(
            'volume_image_metadata') or {}).get('image_id') == new_id,
            'the reimage')
        self.settled(server_id)
        self.assertEqual('%s/%s@snap' % (pool, new_id),
                         self.rbd_parent(boot_id))
        self.assertEqual('in-use', self.volume(boot_id)['status'])

    def test_volume_attachment_refresh_after_a_monitor_move(self):
        """The refreshed connection_info names the monitor's new address."""
        server_id, data_id = self.stopped_with_data_volume('mon')
        before = json.loads(self.manage('volume_attachment', 'show',
                                        server_id, data_id, '--json'))
        old = json.loads(before['connection_info'])['data']
        self.assertEqual(['127.0.0.1'], old['hosts'])
        ceph = self.box.service('ceph')
        ceph.run(self.box.ctx, 'move-mon', '127.0.0.2')
        self.addCleanup(ceph.run, self.box.ctx, 'move-mon', '127.0.0.1')
        _connector, after = self.refresh(server_id, data_id)
        new = json.loads(after['connection_info'])['data']
        self.assertEqual(['127.0.0.2'], new['hosts'])
        self.assertEqual(old['ports'], new['ports'])
        self.assertEqual([after['attachment_id']],
                         [a['id'] for a in self.attachments(data_id)])
