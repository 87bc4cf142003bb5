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

"""The box with Keystone: Cinder's guards and service tokens as in a cloud.

``tools/stack.sh up --keystone``: a real keystone-api (PyPI keystone, fernet
tokens), cinder-api behind keystonemiddleware, the ``cinder`` service user
with the ``service`` role.  The printed client commands authenticate through
``STATE/openrc``; no password is printed or logged.

On a volume two hosts attach.  The admin's own token sent as a service
token is refused (no ``service`` role); the service user's token (what Nova
sends) passes Cinder's bug-2004555 guard, and our teardown revokes exactly
the host that leaves.  The admin without a service token ends one host of
several with an attachment delete (Cinder refuses an os-force_detach of a
volume with several attachments to anyone but a service; it lets an admin
delete an attachment no instance holds): again only that host leaves.  The
same through ``openstack volume force detach`` (the OpenStackClient
plugin), and a reset-state found and repaired by ``openstack volume audit
--fix``.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile

import testtools

from cinder_forcedetach.cmd import output
from devbox.services import tgtd
from tests import fakes

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
STACK_SH = os.path.join(REPO, 'tools', 'stack.sh')
IQN = 'iqn.2026-11.org.cinder-forcedetach.keystone:'


class KeystoneBoxTestCase(testtools.TestCase):

    def setUp(self):
        super(KeystoneBoxTestCase, self).setUp()
        self.state = tempfile.mkdtemp(prefix='cfd-keystone-')
        self.env = fakes.box_env(self.state, keystone=True)
        self.outputs = []
        self.addCleanup(shutil.rmtree, self.state, True)
        self.addCleanup(self.stack, 'down')

    def stack(self, *args):
        res = subprocess.run([STACK_SH] + list(args), env=self.env,
                             capture_output=True, text=True, timeout=900)
        self.outputs.append(res.stdout + res.stderr)
        return res

    def shell(self, command):
        """A printed command line, as a user pastes it."""
        res = subprocess.run(['bash', '-c', command], env=self.env,
                             capture_output=True, text=True, timeout=300)
        self.outputs.append(res.stdout + res.stderr)
        return res

    def acls(self, volume_id):
        info = json.load(open(os.path.join(self.state, 'stack.json')))
        out = tgtd.tgtadm(info['tgt_control_port'], '--op', 'show',
                          '--mode', 'target').stdout
        block = out.split('volume-' + volume_id, 1)[1].split('\nTarget ')[0]
        return set(re.findall(r'^\s+(iqn\.\S+)$',
                              block.split('ACL information:')[1], re.M))

    def test_guards_and_service_tokens(self):
        up = self.stack('up')
        self.assertEqual(0, up.returncode, up.stderr[-3000:])
        lines = up.stdout.splitlines()
        create = lines[lines.index('Create a volume:') + 1].strip()
        force = lines[lines.index('Force-detach it from every host:') +
                      1].strip()
        openrc = os.path.join(self.state, 'openrc')
        self.assertTrue(create.startswith('. %s && ' % openrc), create)
        self.assertEqual(0o600, os.stat(openrc).st_mode & 0o777)
        cinder = create.split(' && ')[1].split()[0]
        manage = force.split(' volume force-detach')[0]
        service = manage.replace(openrc, openrc + '-service')

        created = self.shell(create.replace(
            'create 1', 'create --volume-type multiattach 1'))
        self.assertEqual(0, created.returncode, created.stderr)
        vol = re.search(r'^\|\s+id\s+\|\s+(\S+)\s+\|', created.stdout,
                        re.M).group(1)
        self.wait_status(openrc, cinder, vol, 'available')
        attachments = {host: self.attach(openrc, cinder, vol, host)
                       for host in ('k1', 'k2')}
        self.wait_status(openrc, cinder, vol, 'in-use')
        self.assertEqual({IQN + 'k1', IQN + 'k2'}, self.acls(vol))
        one_host = ' volume force-detach %s --attachment %s --connector ' \
                   "'%s'" % (vol, attachments['k1'], json.dumps(
                       {'host': 'k1', 'initiator': IQN + 'k1'}))

        # The admin's token as a service token: no service role, refused.
        posing = self.shell(manage.replace('cinder-forcedetach',
                                           'cinder-forcedetach '
                                           '--service-token') + one_host)
        self.assertNotEqual(0, posing.returncode, posing.stdout)
        self.assertEqual({IQN + 'k1', IQN + 'k2'}, self.acls(vol))

        # The service user's token: host k1 leaves, k2 keeps its access.
        detached = self.shell(service.replace(
            'cinder-forcedetach', 'cinder-forcedetach --service-token') +
            one_host)
        self.assertEqual(0, detached.returncode, detached.stderr)
        self.assertEqual({IQN + 'k2'}, self.acls(vol))
        self.wait_status(openrc, cinder, vol, 'in-use')

        # The admin, no service token: k1's attachment deleted (no instance
        # holds it), k2 keeps its access.
        again = self.attach(openrc, cinder, vol, 'k1')
        self.assertEqual({IQN + 'k1', IQN + 'k2'}, self.acls(vol))
        ended = self.shell(manage + one_host.replace(attachments['k1'],
                                                     again))
        self.assertEqual(0, ended.returncode, ended.stderr)
        self.assertIn('attachment delete of %s' % again, ended.stdout)
        self.assertEqual({IQN + 'k2'}, self.acls(vol))
        self.wait_status(openrc, cinder, vol, 'in-use')

        # Every host, as printed (the last attachment: no guard left).
        last = self.shell(force.replace('VOLUME_ID', vol))
        self.assertEqual(0, last.returncode, last.stderr)
        self.wait_status(openrc, cinder, vol, 'available')
        self.assertFalse(self.exported(vol))

        self.check_openstack_plugin(openrc, cinder, vol)

        with open(os.path.join(self.state, 'secrets.json')) as f:
            secrets = [v for v in json.load(f).values() if len(v) >= 16]
        texts = ['\n'.join(self.outputs)]
        for name in os.listdir(os.path.join(self.state, 'logs')):
            with open(os.path.join(self.state, 'logs', name),
                      errors='replace') as f:
                texts.append(f.read())
        self.assertEqual([], [s[:3] + '...' for s in secrets
                              if any(s in t for t in texts)])

    def check_openstack_plugin(self, openrc, cinder, vol):
        """The same through ``openstack`` (our OpenStackClient plugin).

        Both hosts attach again; the service user with ``--service-token``
        detaches k1 (k2 keeps its ACL); k1 attaches again and the admin
        ends it with an attachment delete (k2 keeps its ACL); an unknown
        volume fails clearly, and the admin detaches the last host (the
        target goes).  Outputs go through the secrets check of the test.
        """
        openstack = os.path.join(os.path.dirname(cinder), 'openstack')
        admin = '. %s && %s ' % (openrc, openstack)
        service = '. %s-service && %s ' % (openrc, openstack)
        attachments = {host: self.attach(openrc, cinder, vol, host)
                       for host in ('k1', 'k2')}
        self.wait_status(openrc, cinder, vol, 'in-use')
        self.assertEqual({IQN + 'k1', IQN + 'k2'}, self.acls(vol))

        shown = self.shell(admin + 'volume attachment connection show '
                                   '-f json %s' % attachments['k1'])
        self.assertEqual(0, shown.returncode, shown.stderr)
        shown = json.loads(shown.stdout)
        self.assertEqual((attachments['k1'], vol),
                         (shown['id'], shown['volume_id']))
        # Cinder's attachments API flattens connection_info: the driver's
        # data with driver_volume_type.
        info = shown['connection_info']
        data = info.get('data', info)
        self.assertEqual('iscsi', info['driver_volume_type'], info)
        self.assertIn('volume-' + vol, data['target_iqn'])
        secrets = {k: v for k, v in data.items()
                   if output.SECRET_RE.search(k) and v}
        self.assertEqual({k: output.MASK for k in secrets}, secrets)

        one_host = 'volume force detach -f json %s --attachment %s ' \
                   "--connector '%s'" % (vol, attachments['k1'], json.dumps(
                       {'host': 'k1', 'initiator': IQN + 'k1'}))
        detached = self.shell(service + one_host + ' --service-token')
        self.assertEqual(0, detached.returncode, detached.stderr)
        result = json.loads(detached.stdout)
        self.assertEqual((vol, [attachments['k2']]),
                         (result['volume_id'], result['attachments']))
        self.assertEqual({IQN + 'k2'}, self.acls(vol))

        again = self.attach(openrc, cinder, vol, 'k1')
        ended = self.shell(admin + one_host.replace(attachments['k1'],
                                                    again))
        self.assertEqual(0, ended.returncode, ended.stderr)
        self.assertNotIn('Traceback', ended.stderr)
        result = json.loads(ended.stdout)
        self.assertEqual((vol, [attachments['k2']]),
                         (result['volume_id'], result['attachments']))
        self.assertEqual({IQN + 'k2'}, self.acls(vol))

        missing = self.shell(admin + 'volume force detach no-such-volume')
        self.assertEqual(1, missing.returncode, missing.stdout)
        self.assertIn('no volume named no-such-volume', missing.stderr)
        self.assertNotIn('Traceback', missing.stderr)

        last = self.shell(admin + 'volume force detach -f json %s' % vol)
        self.assertEqual(0, last.returncode, last.stderr)
        result = json.loads(last.stdout)
        self.assertEqual((vol, []),
                         (result['volume_id'], result['attachments']))
        self.wait_status(openrc, cinder, vol, 'available')
        self.assertFalse(self.exported(vol))
        self.check_openstack_audit(openrc, cinder, vol)

    def check_openstack_audit(self, openrc, cinder, vol):
        """``openstack volume audit``: a reset-state found and repaired.

        Host k1 attaches; the admin resets the volume to ``detaching``
        (what an operator "fixing" a stuck detach does), which leaves k1's
        ACL on the target.  The audit (no Nova in this box's catalog: an
        instance's attachment would be refused) leaves the volume alone
        within its grace period, finds it stuck with ``--grace 0``, and
        ``--fix`` force-detaches it: the target is gone, the volume
        available, and a second audit finds nothing.
        """
        audit = '. %s && %s volume audit -f json ' % (
            openrc, os.path.join(os.path.dirname(cinder), 'openstack'))
        self.attach(openrc, cinder, vol, 'k1')
        self.wait_status(openrc, cinder, vol, 'in-use')
        reset = self.shell('. %s && %s reset-state --state detaching %s' % (
            openrc, cinder, vol))
        self.assertEqual(0, reset.returncode, reset.stderr)
        self.wait_status(openrc, cinder, vol, 'detaching')

        def found(options):
            res = self.shell(audit + options)
            self.assertEqual(0, res.returncode, res.stderr)
            return [(r['case'], r['result']) for r in json.loads(res.stdout)
                    if r['volume'] == vol]
        self.assertEqual([], found(''))
        self.assertEqual([('stuck_transition', 'found')],
                         found('--grace 0'))
        self.assertEqual({IQN + 'k1'}, self.acls(vol))
        self.assertEqual([('stuck_transition', 'repaired')],
                         found('--grace 0 --fix'))
        self.wait_status(openrc, cinder, vol, 'available')
        self.assertFalse(self.exported(vol))
        self.assertEqual([], found('--grace 0 --fix'))

    def attach(self, openrc, cinder, vol, host):
        """An attachment of *vol* by *host* (a real initiator name)."""
        made = self.shell(
            '. %s && %s attachment-create --connect True --initiator %s '
            '--ip 127.0.0.1 --host %s --platform x86_64 --ostype linux '
            '%s' % (openrc, cinder, IQN + host, host, vol))
        self.assertEqual(0, made.returncode, made.stderr)
        att = re.search(r'^\|\s+id\s+\|\s+(\S+)\s+\|', made.stdout,
                        re.M).group(1)
        done = self.shell('. %s && %s attachment-complete %s' % (
            openrc, cinder, att))
        self.assertEqual(0, done.returncode, done.stderr)
        return att

    def exported(self, volume_id):
        """Whether tgtd has a target for the volume."""
        info = json.load(open(os.path.join(self.state, 'stack.json')))
        return 'volume-' + volume_id in tgtd.tgtadm(
            info['tgt_control_port'], '--op', 'show', '--mode',
            'target').stdout

    def wait_status(self, openrc, cinder, vol, status):
        for _ in range(120):
            shown = self.shell('. %s && %s show %s' % (openrc, cinder, vol))
            found = re.search(r'^\|\s+status\s+\|\s+(\S+)', shown.stdout,
                              re.M)
            if found and found.group(1) == status:
                return
            subprocess.run(['sleep', '0.5'])
        self.fail('volume %s never %s: %s' % (vol, status, shown.stdout))
