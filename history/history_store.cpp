#include "history/history_store.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

namespace {

constexpr int kSchemaVersion = 1;

// A prepared statement, finalized on scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql, const std::string& where) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) {
      throw InputError(fmt::format("{}: {}", where, sqlite3_errmsg(db)));
    }
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  sqlite3_stmt* get() const { return stmt_; }
  void text(int i, const std::string& v) { sqlite3_bind_text(stmt_, i, v.c_str(), -1, SQLITE_TRANSIENT); }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

void exec(sqlite3* db, const char* sql, const std::string& where) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    const std::string why = message != nullptr ? message : "unknown error";
    sqlite3_free(message);
    throw InputError(fmt::format("{}: {}", where, why));
  }
}

std::string column_text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t != nullptr ? reinterpret_cast<const char*>(t) : "";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

HistoryStore::HistoryStore(const std::string& path) : path_(path) {
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    const std::string why = db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw InputError(fmt::format("--db {}: cannot open: {}", path, why));
  }
  sqlite3_busy_timeout(db_, 10000);
  const std::string where = fmt::format("--db {}", path);
  try {
    exec(db_,
         "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
         "CREATE TABLE IF NOT EXISTS figures(commit_id TEXT NOT NULL, created TEXT NOT NULL, machine TEXT NOT NULL,"
         " config TEXT NOT NULL, metric TEXT NOT NULL, value REAL NOT NULL, source TEXT NOT NULL,"
         " PRIMARY KEY (commit_id, machine, config, metric, created));"
         "CREATE INDEX IF NOT EXISTS figures_series ON figures(metric, machine, config);",
         where + " (not a dpbench history?)");
    Statement version(db_, "SELECT value FROM meta WHERE key = 'schema'", where);
    if (sqlite3_step(version.get()) == SQLITE_ROW) {
      const std::string v = column_text(version.get(), 0);
      if (v != std::to_string(kSchemaVersion)) {
        throw InputError(fmt::format("{}: history schema {}, this dpbench reads {}", where, v, kSchemaVersion));
      }
    } else {
      exec(db_, fmt::format("INSERT INTO meta VALUES ('schema', '{}')", kSchemaVersion).c_str(), where);
    }
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

HistoryStore::~HistoryStore() { sqlite3_close(db_); }

long HistoryStore::add(const std::vector<HistoryFigure>& figures) {
  const std::string where = fmt::format("--db {}", path_);
  exec(db_, "BEGIN", where);
  try {
    Statement insert(db_, "INSERT OR REPLACE INTO figures VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", where);
    for (const HistoryFigure& f : figures) {
      sqlite3_reset(insert.get());
      insert.text(1, f.commit);
      insert.text(2, f.created);
      insert.text(3, f.machine);
      insert.text(4, f.config);
      insert.text(5, f.metric);
      sqlite3_bind_double(insert.get(), 6, f.value);
      insert.text(7, f.source);
      if (sqlite3_step(insert.get()) != SQLITE_DONE)
        throw InputError(fmt::format("{}: {}", where, sqlite3_errmsg(db_)));
    }
    exec(db_, "COMMIT", where);
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  return static_cast<long>(figures.size());
}

std::vector<HistorySeries> HistoryStore::series(const std::string& metric, const std::string& config,
                                                const std::string& machine) const {
  Statement q(db_,
              "SELECT machine, config, metric, commit_id, MIN(created) OVER (PARTITION BY machine, commit_id), value "
              "FROM figures WHERE instr(metric, ?1) > 0 AND instr(config, ?2) > 0 AND instr(machine, ?3) > 0",
              fmt::format("--db {}", path_));
  q.text(1, metric);
  q.text(2, config);
  q.text(3, machine);
  // (machine, config, metric) -> (first created, commit) -> values
  std::map<std::tuple<std::string, std::string, std::string>,
           std::map<std::pair<std::string, std::string>, std::vector<double>>>
      grouped;
  while (sqlite3_step(q.get()) == SQLITE_ROW) {
    grouped[{column_text(q.get(), 0), column_text(q.get(), 1), column_text(q.get(), 2)}]
           [{column_text(q.get(), 4), column_text(q.get(), 3)}]
               .push_back(sqlite3_column_double(q.get(), 5));
  }
  std::vector<HistorySeries> out;
  for (const auto& [key, commits] : grouped) {
    HistorySeries s;
    std::tie(s.machine, s.config, s.metric) = key;
    for (const auto& [when, values] : commits) {
      s.created.push_back(when.first);
      s.commits.push_back(when.second);
      s.values.push_back(median(values));
    }
    out.push_back(std::move(s));
  }
  return out;
}

long HistoryStore::prune(int keep) {
  if (keep < 1) throw InputError(fmt::format("--keep {}: must be at least 1", keep));
  const std::string where = fmt::format("--db {}", path_);
  Statement del(db_,
                "DELETE FROM figures WHERE rowid IN (SELECT f.rowid FROM figures f JOIN ("
                " SELECT machine, commit_id, ROW_NUMBER() OVER (PARTITION BY machine ORDER BY MIN(created) DESC) AS k"
                " FROM figures GROUP BY machine, commit_id) c ON f.machine = c.machine AND f.commit_id = c.commit_id"
                " WHERE c.k > ?1)",
                where);
  sqlite3_bind_int(del.get(), 1, keep);
  if (sqlite3_step(del.get()) != SQLITE_DONE) throw InputError(fmt::format("{}: {}", where, sqlite3_errmsg(db_)));
  const long deleted = sqlite3_changes(db_);
  exec(db_, "VACUUM", where);
  return deleted;
}

long HistoryStore::rows() const {
  Statement q(db_, "SELECT COUNT(*) FROM figures", fmt::format("--db {}", path_));
  return sqlite3_step(q.get()) == SQLITE_ROW ? static_cast<long>(sqlite3_column_int64(q.get(), 0)) : 0;
}

}  // namespace dpbench
