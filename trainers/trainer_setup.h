// What the reference trainers share besides the loop, in three parts
// included here: their flags (trainer_flags.h), the models, optimizers and
// scalers those flags select (trainer_models.h) and the datasets
// (trainer_datasets.h). What is left here ties them to a trainer process:
// its start, the loop options, the final line and the local ranks of a DDP
// trainer.
//
//   int main(int argc, char** argv) {
//     TrainerConfig config = StartTrainerOrExit(argc, argv, "single_trainer", "");  // bad flag: exit 2
//     absl::StatusOr<TrainerDatasets> data = LoadTrainerDatasets(config);
//     ...
//     LOCKSTEP_ASSIGN_OR_RETURN(TrainResult result, RunTraining(MakeLoopOptions(config, 0, 1), parts));
//     PrintFinalResult("single_trainer", result, "");
//
// Code that includes this header or depends on //trainers:trainer_setup
// keeps everything it had before the split.
#ifndef LOCKSTEP_TRAINERS_TRAINER_SETUP_H_
#define LOCKSTEP_TRAINERS_TRAINER_SETUP_H_

#include <string>

#include "trainers/train_loop.h"
// Moved out of this header in the split; included so that code that found them here still compiles.
#include "trainers/trainer_datasets.h"  // moved: TrainerDatasets, LoadTrainerDatasets
#include "trainers/trainer_flags.h"     // moved: TrainerConfig, flag parsing, UsageError, MlpSizes
#include "trainers/trainer_models.h"    // moved: MakeModel, FreezeParameters, optimizers, GradScaler

namespace lockstep {

// Every trainer's start: restarts with faster OpenBLAS kernels when the
// library fell back to slow ones (nn/blas_kernels.h), parses the flags and
// reads the shared ones; a bad flag exits with the usage (status 2).
TrainerConfig StartTrainerOrExit(int argc, char** argv, const char* program, const char* extra_usage);

// "<program>: final test accuracy 86.09% (10000 examples), 36168 samples/s
// <where>, 1407 steps", when an epoch completed.
void PrintFinalResult(const char* program, const TrainResult& result, const std::string& where);
// The trainers' last line: "<program>: step time: data wait 1 %, ...,
// exposed communication 38 %, ...; communication-bound: ..."
// (StepBreakdownLine, train_loop.h), when any step was trained.
void PrintStepBreakdown(const char* program, const TrainResult& result, const std::string& comm_hint = "");

TrainLoopOptions MakeLoopOptions(const TrainerConfig& config, int rank, int world_size);

// Whether a launcher set this process's rank: RANK (torchrun, tools/launch),
// OMPI_COMM_WORLD_RANK (mpirun) or SLURM_PROCID (srun).
bool HasRankEnvironment();

// A DDP trainer's start without a rank environment: runs `nproc` ranks of
// this binary with the same arguments on this machine under a store this
// process holds (collectives/bootstrap/local_launch.h), each on its own CPU
// with bind_to_core, and stops them all when one fails. Returns main's exit
// status: 0, 1 when a rank failed (the error printed), 2 for nproc < 1.
int RunLocalRanksOfSelf(const char* program, int argc, char** argv, int nproc, bool bind_to_core);

}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_TRAINER_SETUP_H_
