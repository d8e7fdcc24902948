// The flight recorder's ring (wrap-around, finishing, snapshots), its JSON
// round trip, and the analysis that names the rank behind or out of step.
#include "collectives/flight_recorder.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

FlightRecord AllReduce(uint64_t seq) {
  FlightRecord r;
  r.seq = seq;
  r.op = "AllReduce";
  r.dtype = 0;  // f32
  r.count = 1000;
  r.reduce_op = 0;  // SUM
  return r;
}

TEST(FlightRecorderTest, KeepsTheNewestInOrderAndFinishesByIdOnce) {
  FlightRecorder recorder(4);
  std::vector<uint64_t> ids;
  for (uint64_t seq = 0; seq < 6; ++seq) ids.push_back(recorder.Start(AllReduce(seq)));
  recorder.Finish(ids[0], true);  // Overwritten: ignored.
  recorder.Finish(ids[4], true);
  recorder.Finish(ids[5], false);
  recorder.Finish(ids[5], true);  // Ended already: ignored.
  const std::vector<FlightRecord> kept = recorder.Snapshot();
  ASSERT_EQ(kept.size(), 4u);
  EXPECT_EQ(kept.front().seq, 2u);
  EXPECT_EQ(kept.back().seq, 5u);
  EXPECT_EQ(kept[0].state, FlightRecord::State::kRunning);
  EXPECT_EQ(kept[2].state, FlightRecord::State::kDone);
  EXPECT_EQ(kept[3].state, FlightRecord::State::kFailed);
  EXPECT_GE(kept[3].ended_us, kept[3].started_us);
  FlightRecorder off(0);
  off.Finish(off.Start(AllReduce(1)), true);
  EXPECT_TRUE(off.Snapshot().empty());
}

TEST(FlightRecorderTest, DescribesEveryKindOfOperation) {
  EXPECT_EQ(Describe(AllReduce(5)), "AllReduce #5 (f32, count 1000, SUM)");
  FlightRecord send;
  send.op = "Send";
  send.point_to_point = true;
  send.seq = 2;
  send.dtype = 4;  // i32
  send.count = 3;
  send.peer = 1;
  send.tag = 7;
  EXPECT_EQ(Describe(send), "Send #2 (i32, count 3, to rank 1, tag 7)");
  FlightRecord any = send;
  any.op = "RecvAnySource";
  any.peer = -2;
  EXPECT_EQ(Describe(any), "RecvAnySource #2 (i32, count 3, from any rank, tag 7)");
  FlightRecord barrier;
  barrier.op = "Barrier";
  barrier.seq = 9;
  EXPECT_EQ(Describe(barrier), "Barrier #9 ()");
}

TEST(FlightRecorderTest, JsonRoundTripsAndForeignTextIsRefused) {
  FlightRecorder recorder(8);
  for (uint64_t seq = 0; seq < 3; ++seq) recorder.Finish(recorder.Start(AllReduce(seq)), true);
  recorder.Start(AllReduce(3));
  absl::StatusOr<RankReport> report = ParseRankReport(recorder.ToJson(/*rank=*/2, /*last=*/2));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->rank, 2);
  ASSERT_EQ(report->ops.size(), 2u);
  EXPECT_EQ(report->ops[0].description, "AllReduce #2 (f32, count 1000, SUM)");
  EXPECT_EQ(report->ops[0].state, "done");
  EXPECT_EQ(report->ops[1].state, "running");
  for (const char* bad :
       {"", "{", "[]", "{\"rank\": 1}", "{\"rank\": 1, \"now_us\": 5, \"records\": [{\"seq\": -1}]}"}) {
    EXPECT_FALSE(ParseRankReport(bad).ok()) << bad;
  }
}

TEST(FlightRecorderTest, KeepsTheAlgorithmWhereOneWasRecorded) {
  FlightRecorder recorder(8);
  FlightRecord chosen = AllReduce(0);
  chosen.algorithm = "rabenseifner";
  recorder.Finish(recorder.Start(chosen), true);
  recorder.Finish(recorder.Start(AllReduce(1)), true);
  const std::string json = recorder.ToJson(0);
  EXPECT_NE(json.find("\"algorithm\":\"rabenseifner\""), std::string::npos) << json;
  // Only the first record names one.
  EXPECT_EQ(json.find("\"algorithm\""), json.rfind("\"algorithm\"")) << json;
}

RankReport At(int rank, std::vector<std::pair<std::string, std::string>> ops) {
  RankReport r;
  r.rank = rank;
  r.reported = true;
  for (auto& [description, state] : ops) {
    RankReport::Op op;
    // The sequence number is in the description ("... #5 ...").
    op.seq = std::stoull(description.substr(description.find('#') + 1));
    op.description = description;
    op.state = state;
    op.seconds = 1.5;
    r.ops.push_back(op);
  }
  return r;
}

TEST(FlightRecorderTest, NamesTheRankThatRanAnotherCollective) {
  const std::string text = AnalyzeFlightRecords({
      At(0, {{"Barrier #4 ()", "done"}, {"AllReduce #5 (f32, count 1000, SUM)", "failed"}}),
      At(1, {{"Barrier #4 ()", "done"}, {"AllReduce #5 (f32, count 1000, SUM)", "failed"}}),
      At(2, {{"Barrier #4 ()", "done"}, {"Barrier #5 ()", "failed"}}),
  });
  EXPECT_NE(text.find("rank 0 failed in AllReduce #5 (f32, count 1000, SUM)"), std::string::npos) << text;
  EXPECT_NE(text.find("Out of step: rank 2 ran Barrier #5 () where ranks 0, 1 ran AllReduce #5 (f32, count 1000, SUM)"),
            std::string::npos)
      << text;
}

TEST(FlightRecorderTest, NamesTheRankBehindAndTheOneThatSentNothing) {
  RankReport silent;
  silent.rank = 3;
  const std::string text = AnalyzeFlightRecords({
      At(0, {{"AllReduce #5 (f32, count 1000, SUM)", "running"}}),
      At(1, {{"AllReduce #5 (f32, count 1000, SUM)", "running"}}),
      At(2, {{"Barrier #4 ()", "done"}}),
      silent,
  });
  EXPECT_NE(text.find("rank 0 waits in AllReduce #5 (f32, count 1000, SUM) for 1.5 s"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 3 sent no report"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 2 is behind: it has not started AllReduce #5 (f32, count 1000, SUM); its newest "
                      "collective is Barrier #4 (), done"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 3 has not reached AllReduce #5"), std::string::npos) << text;
  // Everyone in step: no "Out of step".
  const std::string fine =
      AnalyzeFlightRecords({At(0, {{"Barrier #1 ()", "failed"}}), At(1, {{"Barrier #1 ()", "failed"}})});
  EXPECT_EQ(fine.find("Out of step"), std::string::npos) << fine;
}

}  // namespace
}  // namespace lockstep
