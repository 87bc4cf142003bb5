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


"""The Force Detach form: one attachment, or every host."""

from django.utils.translation import gettext_lazy as _
from horizon import forms
from horizon import messages

from cinder_forcedetach.cmd import api_commands
from cinder_forcedetach.cmd.errors import CliError
from cinder_forcedetach.dashboard import api as fd_api

#: The choice that detaches every host (a required field cannot be empty).
EVERY_HOST = 'every-host'


class ForceDetach(forms.SelfHandlingForm):
    """The volume is the page's (the view's initial data), not a field.

    A posted volume id would let a crafted form detach another volume than
    the one whose attachments the dialog listed; *target* is one of those
    attachments (or every host), checked against the choices.
    """

    target = forms.ChoiceField(label=_("Detach"))
    service_token = forms.BooleanField(
        label=_("Send my token as a service token too"), required=False,
        help_text=_("As Nova does: Cinder requires it to end an attachment "
                    "an instance may still use (bug #2004555); Keystone "
                    "accepts it only from a user with the service role."))

    def __init__(self, request, *args, **kwargs):
        super(ForceDetach, self).__init__(request, *args, **kwargs)
        self.fields['target'].choices = kwargs['initial']['choices']

    def handle(self, request, data):
        volume_id, target = self.initial['volume_id'], data['target']
        client = fd_api.cinder(request, service_token=data['service_token'])
        every = target == EVERY_HOST
        try:
            result = api_commands.force_detach(
                client, volume_id, attachment_id=None if every else target,
                all_hosts=every)
        except CliError as err:
            messages.error(request, _('Force-detach of volume %(vol)s '
                                      'failed: %(err)s') % {
                'vol': volume_id, 'err': err.message})
            return False
        messages.success(request, _(
            'Volume %(vol)s force-detached: status %(status)s, %(n)d '
            'attachment(s) left.') % {'vol': volume_id,
                                      'status': result['status'],
                                      'n': len(result['attachments'])})
        return True
