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

"""Nova's libvirt driver in the box (``--virt libvirt``), one change.

:mod:`devbox.nova_compute` registers this module as
``nova.virt.box_libvirt`` (``compute_driver =
box_libvirt.BoxLibvirtDriver``).  :class:`BoxLibvirtDriver` is Nova's
``LibvirtDriver`` unchanged for everything but iSCSI volumes:

* **RBD** volumes are Nova's own ``LibvirtNetVolumeDriver``: qemu opens
  the image with its own librbd, authenticated by a libvirt secret, as a
  production compute does.
* **iSCSI**: Nova's ``LibvirtISCSIVolumeDriver`` logs in with the kernel
  initiator (``iscsiadm``, ``iscsi_tcp``), which these kernels lack.  The
  box maps ``iscsi`` to :class:`LibvirtISCSINetVolumeDriver`, a network
  disk that qemu's own initiator (libiscsi) opens: portal and
  ``IQN/LUN`` from Cinder's connection info, the CHAP password in a
  libvirt secret of usage ``iscsi``, and the connector's initiator name
  in the disk's ``<initiator>`` so that the target's ACL, bound to that
  name, is what admits the guest.  Nova once had this driver (a TODO in
  its ``VOLUME_DRIVERS`` mentions re-introducing native iSCSI); what the
  box proves with it is the target's side, not Nova's kernel path.

The connector's initiator name is the box's
(``iqn.2010-10.org.openstack.box:<host>``) rather than the machine's
``/etc/iscsi/initiatorname.iscsi``, so that two computes on one machine
are two initiators.
"""

from lxml import etree
from nova import conf as nova_conf
from nova.virt.libvirt import config as vconfig
from nova.virt.libvirt import driver as libvirt_driver
from nova.virt.libvirt.volume import net

from devbox.services.nova import initiator_name

CONF = nova_conf.CONF


class ISCSINetworkDisk(vconfig.LibvirtConfigGuestDisk):
    """A network disk whose ``<source>`` also names the initiator."""

    def __init__(self, disk, initiator):
        super(ISCSINetworkDisk, self).__init__()
        self.__dict__.update(disk.__dict__)
        self.initiator = initiator

    def format_dom(self):
        dev = super(ISCSINetworkDisk, self).format_dom()
        source = dev.find('source')
        element = etree.SubElement(source, 'initiator')
        etree.SubElement(element, 'iqn', name=self.initiator)
        return dev


class LibvirtISCSINetVolumeDriver(net.LibvirtNetVolumeDriver):
    """iSCSI volumes as network disks of qemu's libiscsi."""

    @staticmethod
    def _usage_id(connection_info):
        return connection_info['data']['target_iqn']

    def connect_volume(self, connection_info, instance):
        data = connection_info['data']
        if data.get('auth_method') == 'CHAP':
            # One secret per target, replaced when the password changes.
            self.host.delete_secret('iscsi', self._usage_id(connection_info))
            self.host.create_secret('iscsi', self._usage_id(connection_info),
                                    password=data['auth_password'])

    def disconnect_volume(self, connection_info, instance, force=False):
        self.host.delete_secret('iscsi', self._usage_id(connection_info))

    def get_config(self, connection_info, disk_info):
        conf = super(LibvirtISCSINetVolumeDriver, self).get_config(
            connection_info, disk_info)
        data = connection_info['data']
        host, _sep, port = data['target_portal'].rpartition(':')
        conf.source_name = '%s/%s' % (data['target_iqn'],
                                      data.get('target_lun', 0))
        conf.source_hosts = [host.strip('[]')]
        conf.source_ports = [port]
        if data.get('auth_method') == 'CHAP':
            secret = self.host.find_secret('iscsi',
                                           self._usage_id(connection_info))
            conf.auth_username = data['auth_username']
            conf.auth_secret_type = 'iscsi'
            conf.auth_secret_uuid = secret.UUIDString() if secret else None
        return ISCSINetworkDisk(conf, initiator_name(CONF.host))


class BoxLibvirtDriver(libvirt_driver.LibvirtDriver):
    """Nova's libvirt driver; iSCSI through qemu's initiator."""

    def __init__(self, virtapi, read_only=False):
        super(BoxLibvirtDriver, self).__init__(virtapi, read_only)
        self.volume_drivers['iscsi'] = LibvirtISCSINetVolumeDriver(self._host)

    def get_volume_connector(self, instance):
        props = super(BoxLibvirtDriver, self).get_volume_connector(instance)
        props['initiator'] = initiator_name(CONF.host)
        return props
