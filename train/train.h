#ifndef HYBRID_TRAIN_H
#define HYBRID_TRAIN_H
// Subcommand entry points; argv[0] is the subcommand name.
int train_main(int argc, char **argv);
int sample_main(int argc, char **argv);
int inspect_main(int argc, char **argv);
int import_main(int argc, char **argv);
int export_main(int argc, char **argv);
int eval_mqar_main(int argc, char **argv);
#endif
