from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_delayq', '0011_group'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('group', ''), _negated=True), fields=['queue', 'group', 'status'], name='delayq_queue_group_status'),
        ),
    ]
