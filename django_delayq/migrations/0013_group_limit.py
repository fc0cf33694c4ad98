from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_delayq', '0012_group_index'),
    ]

    operations = [
        migrations.CreateModel(
            name='GroupLimit',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('queue', models.CharField(max_length=100, verbose_name='queue')),
                ('group', models.CharField(max_length=128, verbose_name='group')),
                ('concurrency', models.PositiveIntegerField(blank=True, null=True, verbose_name='concurrency')),
                ('rate_limit', models.CharField(blank=True, default='', max_length=32, verbose_name='rate limit')),
                ('updated_at', models.DateTimeField(auto_now=True, verbose_name='updated at')),
            ],
            options={
                'verbose_name': 'group limit',
                'verbose_name_plural': 'group limits',
                'constraints': [models.UniqueConstraint(fields=('queue', 'group'), name='delayq_grouplimit_unique')],
            },
        ),
    ]
