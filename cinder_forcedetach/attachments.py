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

"""What the flow and the drivers ask of Cinder's attachment rows."""

import json

from cinder.objects import fields

ENDED_ATTACH_STATUSES = (fields.VolumeAttachStatus.DETACHED,
                         fields.VolumeAttachStatus.DELETED)


def is_live(attachment):
    """Whether an attachment still (or may still) reaches the backend."""
    return attachment.attach_status not in ENDED_ATTACH_STATUSES


def same_host(attachment_connector, connector):
    """Whether two connectors name the same host (name, IQN or a WWPN)."""
    if not attachment_connector or not connector:
        return False
    for key in ('host', 'initiator'):
        if attachment_connector.get(key) and (
                attachment_connector.get(key) == connector.get(key)):
            return True
    wwpns = set(attachment_connector.get('wwpns') or [])
    return bool(wwpns & set(connector.get('wwpns') or []))


def of_other_hosts(attachments, connector):
    """Live attachments, with a connector, of hosts other than *connector*.

    Those whose access stays when that host leaves.
    """
    return [a for a in attachments
            if is_live(a) and a.connector and
            not same_host(a.connector, connector)]


class Attachments(list):
    """Attachments passed between tasks; shown by id only.

    Taskflow's listener logs task results: the attachments' connection_info
    holds CHAP passwords, which must not reach the logs.
    """

    def __repr__(self):
        return 'Attachments(%s)' % ', '.join(a.id for a in self)

    __str__ = __repr__


#: Volume admin metadata recording, while our force-detach tears down, the
#: hosts it revokes (JSON list of connectors; null = every host).  A volume
#: service that restarts after a crash half-way (Cinder's ensure_export at
#: start-up) must not grant them again; the re-run clears it.
TEARDOWN_MARK = 'forcedetach_teardown'


def hosts_in_teardown(volume):
    """Connectors a force-detach was revoking when it stopped.

    ``None``: no force-detach is under way; a list holding ``None``: every
    host.  Read from the volume's admin metadata.
    """
    value = (volume.admin_metadata or {}).get(TEARDOWN_MARK)
    if not value:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return [None]
