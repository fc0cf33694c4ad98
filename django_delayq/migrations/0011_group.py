from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_delayq', '0010_parents_left_help'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='group',
            field=models.CharField(blank=True, db_default='', default='', help_text="The job's group inside its queue (a tenant): due jobs are claimed round-robin among groups (empty: no group).", max_length=128, verbose_name='group'),
        ),
        migrations.AddField(
            model_name='schedule',
            name='group',
            field=models.CharField(blank=True, db_default='', default='', help_text="Its jobs' group (empty: none).", max_length=128, verbose_name='group'),
        ),
    ]
