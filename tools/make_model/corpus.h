// A built-in English text the small test tokenizer learns its merges from, so
// that common words and phrases become few tokens. Written for this project.
#pragma once

#include <string_view>

namespace tpserve::make_model {

inline constexpr std::string_view kTrainingText = R"(The answer is simple. The weather was warm and the sky was clear, so we went out to the river and sat in the shade of the old trees.
What is the capital of France? The capital of France is Paris. What is the capital of Japan? The capital of Japan is Tokyo.
Once upon a time there was a little girl who lived in a house near the forest. Every morning she walked to the village to buy bread and milk for her family.
A computer program is a list of instructions that tells the machine what to do. When you run the program, the computer reads each instruction and does what it says.
Hello! How are you today? I am fine, thank you. Can you help me with my homework? Of course, I would be happy to help you with that.
The model reads the prompt, one token at a time, and writes the next token. It does this again and again until it reaches the end of the answer or the limit.
In the summer the days are long and the nights are short. In the winter it is the other way around, and people stay at home where it is warm.
She said that she would come back in the evening, but she did not come back until the next day. Nobody knew where she had been, and she never told us.
You are a helpful assistant. Please answer the question in one short sentence. If you do not know the answer, say that you do not know.
Water boils at one hundred degrees at sea level. The number of days in a year is three hundred and sixty five, and there are twelve months in a year.
We should test the server with many requests at the same time, and we should check that every request gets the right answer in the right order.
They were going to the market to sell their apples, their pears and their eggs. On the way they met a man with a cart who offered to take them there.
There is a small town by the sea where the fishermen go out before the sun rises and come back in the afternoon with their boats full of fish.
Learning to play music takes time. You have to practice every day, listen to other players, and not give up when something is hard at first.
The first step is to read the file. The second step is to check that the data is correct. The third step is to write the result to a new file.
)";

}  // namespace tpserve::make_model
