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

"""The box's iSCSI volume driver for Nova's libvirt driver: its disk XML.

Nova's configuration options clash with Cinder's in one process (both
register ``default_availability_zone``), and these unit tests share their
process with Cinder's: each case runs in a child Python.  The libvirt host
is a recorder (no libvirtd); the XML is Nova's own config classes'.
"""

import json
import subprocess
import sys
import textwrap
from xml.etree import ElementTree

import testtools

SCRIPT = textwrap.dedent('''
    import json, sys
    from nova import conf as nova_conf
    from devbox import nova_libvirt

    nova_conf.CONF.set_override('host', 'Box-Compute')

    class Secret(object):
        def UUIDString(self):
            return 'secret-uuid'

    class Host(object):
        calls = []
        def create_secret(self, usage_type, usage_id, password=None):
            self.calls.append(['create', usage_type, usage_id, password])
        def delete_secret(self, usage_type, usage_id):
            self.calls.append(['delete', usage_type, usage_id])
        def find_secret(self, usage_type, usage_id):
            return Secret()

    info = json.loads(sys.argv[1])
    host = Host()
    driver = nova_libvirt.LibvirtISCSINetVolumeDriver(host)
    driver.connect_volume(info, None)
    disk = driver.get_config(info, {'bus': 'virtio', 'dev': 'vdb',
                                    'type': 'disk'})
    driver.disconnect_volume(info, None)
    print(json.dumps({'xml': disk.to_xml(), 'calls': host.calls}))
''')
IQN = 'iqn.2010-10.org.openstack:volume-1'


def connection_info(portal='127.0.0.1:13260', chap=True):
    data = {'target_portal': portal, 'target_iqn': IQN, 'target_lun': 1}
    if chap:
        data.update(auth_method='CHAP', auth_username='user',
                    auth_password='pw-secret')
    return {'driver_volume_type': 'iscsi', 'data': data}


class ISCSINetworkDiskTestCase(testtools.TestCase):

    def run_driver(self, info):
        res = subprocess.run([sys.executable, '-c', SCRIPT, json.dumps(info)],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(0, res.returncode, res.stderr[-3000:])
        out = json.loads(res.stdout.strip().splitlines()[-1])
        return out['xml'], ElementTree.fromstring(out['xml']), out['calls']

    def test_a_chap_volume_is_a_libiscsi_disk_with_a_secret(self):
        xml, disk, calls = self.run_driver(connection_info())
        self.assertEqual('network', disk.get('type'))
        source = disk.find('source')
        self.assertEqual(('iscsi', IQN + '/1'),
                         (source.get('protocol'), source.get('name')))
        self.assertEqual(('127.0.0.1', '13260'), (
            source.find('host').get('name'), source.find('host').get('port')))
        # The connector's initiator, which the target's ACL names.
        self.assertEqual('iqn.2010-10.org.openstack.box:box-compute',
                         source.find('initiator/iqn').get('name'))
        auth = disk.find('auth')
        self.assertEqual('user', auth.get('username'))
        self.assertEqual(('iscsi', 'secret-uuid'), (
            auth.find('secret').get('type'), auth.find('secret').get('uuid')))
        self.assertNotIn('pw-secret', xml)
        # The password goes into libvirt's secret; the secret is replaced
        # on connect and removed on disconnect.
        self.assertEqual([['delete', 'iscsi', IQN],
                          ['create', 'iscsi', IQN, 'pw-secret'],
                          ['delete', 'iscsi', IQN]], calls)

    def test_no_chap_no_auth_and_an_ipv6_portal(self):
        _xml, disk, calls = self.run_driver(connection_info('[::1]:3260',
                                                            chap=False))
        self.assertIsNone(disk.find('auth'))
        self.assertEqual('::1', disk.find('source/host').get('name'))
        self.assertEqual([['delete', 'iscsi', IQN]], calls)
