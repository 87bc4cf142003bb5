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
