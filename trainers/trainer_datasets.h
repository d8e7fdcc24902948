// The datasets the trainers' --dataset flag selects: Fashion-MNIST from
// Debian's dataset-fashion-mnist or a directory of its four IDX files
// (normalized with its mean and standard deviation), or a synthetic set
// that needs nothing installed.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(TrainerDatasets data, LoadTrainerDatasets(config));
//   std::printf("%s\n", data.description.c_str());  // "synthetic (60000 train, 10000 test)"
//   parts.train = data.train;
//   parts.test = data.test;
//
// --dataset=auto falls back to the synthetic set only when Fashion-MNIST is
// not installed (a broken install is an error), and says so in the
// description. A --dataset that names no directory is NotFound, which the
// trainers report as a usage error.
#ifndef LOCKSTEP_TRAINERS_TRAINER_DATASETS_H_
#define LOCKSTEP_TRAINERS_TRAINER_DATASETS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "trainers/trainer_flags.h"

namespace lockstep {

struct TrainerDatasets {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> test;
  std::string description;  // "Fashion-MNIST (/usr/share/...)", "synthetic"
};
absl::StatusOr<TrainerDatasets> LoadTrainerDatasets(const TrainerConfig& config);

}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_TRAINER_DATASETS_H_
