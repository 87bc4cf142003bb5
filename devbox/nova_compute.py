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

"""``nova-compute`` of the box: Nova's fake virt driver, two changes.

Run as ``python -m devbox.nova_compute --config-file
nova.conf``.  Nova loads a virt driver only from ``nova.virt.<name>``, so
this module registers itself as ``nova.virt.box_fake`` before Nova's
``nova-compute`` main runs (``compute_driver = box_fake.BoxFakeDriver``);
with ``--libvirt`` it also registers :mod:`devbox.nova_libvirt` as
``nova.virt.box_libvirt``.

:class:`BoxFakeDriver` is Nova's ``FakeDriver`` (servers exist only in
Nova's database; no hypervisor) except:

* its node keeps one UUID across restarts (Nova's ``compute_id`` file):
  the fake driver makes a new one per process, and Nova refuses to start
  a compute whose node changed UUID on the same database;
* its volume connector has a valid iSCSI initiator name
  (``iqn.2010-10.org.openstack.box:<host>``): our drivers refuse the
  fake driver's ``initiator: fake``, as they refuse any name that is not
  an iSCSI name.
"""

import sys

from nova.cmd import compute
import nova.conf
from nova.virt import fake
from nova.virt import node

from devbox.services import nova as nova_service

CONF = nova.conf.CONF


class BoxFakeDriver(fake.FakeDriver):
    """Nova's fake driver with a stable node and a valid initiator."""

    def get_available_resource(self, nodename):
        status = super(BoxFakeDriver, self).get_available_resource(nodename)
        if status:
            status['uuid'] = node.get_local_node_uuid()
        return status

    def get_nodenames_by_uuid(self, refresh=False):
        return {node.get_local_node_uuid(): name
                for name in self.get_available_nodes()}

    def get_volume_connector(self, instance):
        return {'ip': CONF.my_block_storage_ip,
                'host': self._host,
                'initiator': nova_service.initiator_name(self._host),
                'multipath': False,
                'platform': 'x86_64',
                'os_type': 'linux'}


def main():
    sys.modules['nova.virt.box_fake'] = sys.modules[__name__]
    if '--libvirt' in sys.argv:
        # Nova's libvirt driver needs libvirt's Python binding: loaded
        # only by a box with ``--virt libvirt``.
        sys.argv.remove('--libvirt')
        from devbox import nova_libvirt
        sys.modules['nova.virt.box_libvirt'] = nova_libvirt
    return compute.main()


if __name__ == '__main__':
    sys.exit(main())
