from django.db import models


# docs:start legacy-models
# An application's models from before insta_id, as Django made them:
# identity keys (integer for AutoField, bigint for BigAutoField) and a
# foreign key. Migration 0002 adopts both keys with insta_id.adopt_id_column;
# the only change here is Author's field, AutoField -> BigAutoField.
class Author(models.Model):
    id = models.BigAutoField(primary_key=True)  # was models.AutoField
    name = models.TextField()


class Book(models.Model):  # DEFAULT_AUTO_FIELD: BigAutoField
    author = models.ForeignKey(Author, on_delete=models.CASCADE)
    title = models.TextField()
# docs:end legacy-models
