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

"""The OpenStackClient plugin: cinder-forcedetach's API commands in
``openstack``.

``pip install python-openstackclient`` next to this package and::

    openstack volume force detach VOLUME [--attachment ID]
        [--connector JSON|@FILE] [--all-hosts] [--service-token]
    openstack volume attachment connection show ATTACHMENT [--show-secrets]

Authentication, region, interface and TLS are OpenStackClient's own
(``clouds.yaml``, ``--os-cloud``, ``OS_*``).  The commands call the same
functions as ``cinder-forcedetach`` (:mod:`cinder_forcedetach.cmd.
api_commands`) through the same client (:mod:`cinder_forcedetach.cmd.
api_client`), built by :func:`.plugin.make_client` from OpenStackClient's
session and the block-storage endpoint of the catalog.

``cinder-forcedetach attachment refresh``, ``fence`` and ``audit`` are not
here: they are no API calls but run on a volume host, from cinder.conf and
Cinder's database (:mod:`cinder_forcedetach.cmd.local`).
"""
