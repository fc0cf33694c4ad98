"""Jobs that wait for other jobs (core/workflows.py): the ``waiting`` status, the
``parents_left`` counter and the ``JobDependency`` edges."""

from django.db import migrations, models

STATUSES = [("scheduled", "scheduled"), ("running", "running"), ("retrying", "retrying"),
            ("succeeded", "succeeded"), ("dead", "dead"), ("cancelled", "cancelled"),
            ("expired", "expired"), ("waiting", "waiting")]


class Migration(migrations.Migration):

    dependencies = [
        ("django_delayq", "0005_periodic_schedules"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="parents_left",
            field=models.PositiveIntegerField(
                db_default=0, default=0, verbose_name="parents left",
                help_text="Parents (after=...) not finished yet; released to Redis at 0."),
        ),
        migrations.AlterField(
            model_name="job",
            name="status",
            field=models.CharField(choices=STATUSES, default="scheduled", max_length=16,
                                   verbose_name="status"),
        ),
        migrations.AlterField(
            model_name="jobattempt",
            name="outcome",
            field=models.CharField(choices=STATUSES, max_length=16, verbose_name="outcome"),
        ),
        migrations.CreateModel(
            name="JobDependency",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("parent_id", models.CharField(max_length=26, verbose_name="parent")),
                ("child_id", models.CharField(db_index=True, max_length=26,
                                              verbose_name="child")),
                ("resolved", models.BooleanField(default=False, verbose_name="resolved")),
                ("run_on_failure", models.BooleanField(
                    default=False, verbose_name="run on failure",
                    help_text="The child runs even if this parent ends dead, cancelled or "
                              "expired.")),
            ],
            options={
                "verbose_name": "job dependency",
                "verbose_name_plural": "job dependencies",
                "indexes": [models.Index(fields=["resolved", "parent_id"],
                                         name="delayq_dependency_open")],
                "constraints": [models.UniqueConstraint(fields=("parent_id", "child_id"),
                                                        name="delayq_dependency_unique")],
            },
        ),
    ]
