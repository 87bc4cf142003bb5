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

"""Benchmark-only driver: our file volumes behind upstream's tgt helper.

``volume_driver = benchmarks._upstream_tgt_driver.UpstreamTgtDriver``

The comparison point of ``benchmarks/api_force_detach.py``: volume storage
is ours (:class:`cinder_forcedetach.drivers.common.FileVolumeDriver`,
sparse files), so both sides export the same kind of backing store, but
everything an export and a connection do is Cinder's own
``cinder.volume.targets.tgt.TgtAdm`` (``target_helper = tgtadm``), called
exactly as upstream's LVM driver calls its target driver
(``cinder/volume/drivers/lvm.py``): ``create_export`` writes a target
config file into ``volumes_dir`` and runs ``tgt-admin --update``,
``remove_export`` runs ``tgt-admin --force --delete``,
``terminate_connection`` does nothing.  No force-detach mixin.
"""

from oslo_utils import importutils

from cinder_forcedetach.drivers import common


class UpstreamTgtDriver(common.FileVolumeDriver):
    """File volumes exported by upstream Cinder's TgtAdm target helper."""

    DEFAULT_BACKEND_NAME = 'upstream_tgt'

    def __init__(self, *args, **kwargs):
        super(UpstreamTgtDriver, self).__init__(*args, **kwargs)
        # As LVMVolumeDriver.__init__.
        target_driver = self.target_mapping[
            self.configuration.safe_get('target_helper')]
        self.target_driver = importutils.import_object(
            target_driver,
            configuration=self.configuration,
            executor=self._execute)
        self.protocol = (self.target_driver.storage_protocol or
                         self.target_driver.protocol)

    def check_for_setup_error(self):
        """Nothing to check here (LVM checks its volume group)."""

    # -- as LVMVolumeDriver's "Interface methods for DataPath" -------------

    def ensure_export(self, context, volume):
        return self.target_driver.ensure_export(context, volume,
                                                self.local_path(volume))

    def create_export(self, context, volume, connector):
        export_info = self.target_driver.create_export(
            context, volume, self.local_path(volume))
        return {'provider_location': export_info['location'],
                'provider_auth': export_info['auth']}

    def remove_export(self, context, volume):
        self.target_driver.remove_export(context, volume)

    def initialize_connection(self, volume, connector):
        return self.target_driver.initialize_connection(volume, connector)

    def validate_connector(self, connector):
        return self.target_driver.validate_connector(connector)

    def terminate_connection(self, volume, connector, **kwargs):
        # LVM: a multiattach volume still attached on the same host keeps
        # its export; TgtAdm's terminate_connection is a no-op.
        def same_connector(attach):
            return (attach.connector and
                    self.target_driver.are_same_connector(attach.connector,
                                                          connector))

        attachments = volume.volume_attachment
        if (volume.multiattach and
                sum(1 for a in filter(same_connector, attachments)) > 1):
            return True

        self.target_driver.terminate_connection(volume, connector, **kwargs)
        return len(attachments) > 1
